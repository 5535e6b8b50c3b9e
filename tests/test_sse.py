"""The SSE parser keeps everything a provider sends, however the bytes are split, and the writer round-trips."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunktape.wire import _sse as sse_module
from chunktape.wire._sse import SseComment, SseEvent, SseItem, SseParser, parse_sse, write_sse


def parse_in_pieces(body: bytes, cuts: list[int]) -> list[SseItem]:
    parser = SseParser()
    items: list[SseItem] = []
    start = 0
    for cut in sorted(cuts):
        items += parser.feed(body[start:cut])
        start = cut
    items += parser.feed(body[start:])
    return items + parser.close()


def test_data_lines_are_joined_with_newline() -> None:
    assert parse_sse(b"data: a\ndata:b\ndata:  c\n\n") == [SseEvent(data="a\nb\n c")]


def test_fields_event_id_retry_and_comments_are_kept() -> None:
    body = b": keep-alive\n\nevent: error\nid: 7\nretry: 1500\ndata: {}\n\n: OPENROUTER PROCESSING\n\n"
    assert parse_sse(body) == [
        SseComment(text="keep-alive"),
        SseEvent(data="{}", event="error", id="7", retry=1500),
        SseComment(text="OPENROUTER PROCESSING"),
    ]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(eol: bytes) -> None:
    body = eol.join([b"data: one", b"data: two", b"", b": c", b"", b"data: [DONE]", b"", b""])
    assert parse_sse(body) == [SseEvent(data="one\ntwo"), SseComment(text="c"), SseEvent(data="[DONE]")]


def test_cr_at_the_end_of_one_read_and_lf_at_the_start_of_the_next() -> None:
    parser = SseParser()
    assert parser.feed(b"data: x\r") == []
    assert parser.feed(b"\n\r") == [SseEvent(data="x")]
    assert parser.feed(b"\ndata: y\r\n\r\n") == [SseEvent(data="y")]
    assert parser.close() == []


def test_a_field_and_a_utf8_character_split_across_reads() -> None:
    body = "data: 北京 😊\n\n".encode()
    for cut in range(1, len(body)):
        assert parse_in_pieces(body, [cut]) == [SseEvent(data="北京 😊")], cut


def test_bom_line_without_colon_invalid_retry_and_nul_id() -> None:
    body = b"\xef\xbb\xbfdata\nretry: soon\nid: a\x00b\n\n"
    assert parse_sse(body) == [SseEvent(data="")]


def test_last_event_id_is_sticky_but_events_carry_their_own() -> None:
    parser = SseParser()
    assert parser.feed(b"id: 1\ndata: a\n\ndata: b\n\n") == [SseEvent(data="a", id="1"), SseEvent(data="b")]
    assert parser.last_event_id == "1"


def test_close_flushes_an_unterminated_final_event() -> None:
    assert parse_sse(b"data: a\n\ndata: [DONE]") == [SseEvent(data="a"), SseEvent(data="[DONE]")]


@pytest.mark.parametrize("tail", [b'data: {"cho', b"data: [DONE]\n", b"data: [DONE]"])
def test_close_marks_the_final_event_without_its_blank_line_as_unterminated(tail: bytes) -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\n\n" + tail) == [SseEvent(data="a")]
    items = parser.close()
    assert items == [SseEvent(data=tail.removeprefix(b"data: ").strip().decode())]
    assert parser.unterminated is items[-1]


def test_a_cleanly_terminated_body_has_no_unterminated_event() -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\n\n: done\n") == [SseEvent(data="a"), SseComment(text="done")]
    assert parser.close() == []
    assert parser.unterminated is None


@pytest.mark.parametrize(
    "item",
    [SseComment(text="a\nb"), SseEvent(event="x\ry"), SseEvent(id="a\0"), SseEvent(retry=-1), SseEvent()],
)
def test_writer_refuses_what_sse_cannot_carry(item: SseItem) -> None:
    with pytest.raises(ValueError, match="SSE"):
        write_sse([item])


_text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n\0"), max_size=12)
_events = st.builds(
    SseEvent,
    data=st.none() | st.lists(_text, min_size=1, max_size=3).map("\n".join),
    event=st.none() | _text,
    id=st.none() | _text,
    retry=st.none() | st.integers(0, 10**6),
).filter(lambda e: not (e.data is None and e.event is None and e.id is None and e.retry is None))
_items = st.lists(_events | st.builds(SseComment, text=_text), max_size=8)


@given(items=_items, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_write_split_parse_round_trip(items: list[SseItem], cuts: list[int]) -> None:
    body = write_sse(items)
    assert parse_in_pieces(body, [min(cut, len(body)) for cut in cuts]) == items


@given(items=_items, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_crlf_bodies_parse_the_same(items: list[SseItem], cuts: list[int]) -> None:
    body = write_sse(items).replace(b"\n", b"\r\n")
    assert parse_in_pieces(body, [min(cut, len(body)) for cut in cuts]) == items


class _CountingPattern:
    """Wraps the parser's line-ending regex and counts the characters it is asked to scan."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.scanned = 0

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        self.scanned += len(text)
        return self.pattern.finditer(text)

    def split(self, text: str) -> list[str]:
        return self.pattern.split(text)


@pytest.mark.parametrize("read_size", [1, 7, 64])
def test_a_large_event_fed_in_small_reads_is_scanned_once(monkeypatch: pytest.MonkeyPatch, read_size: int) -> None:
    counter = _CountingPattern(sse_module._EOL)
    monkeypatch.setattr(sse_module, "_EOL", counter)
    payload = "x" * 50_000 + "é" * 10_000
    body = f"data: {payload}\r\n\r\ndata: b\n\n".encode()
    parser = SseParser()
    items = []
    for start in range(0, len(body), read_size):
        items += parser.feed(body[start : start + read_size])
    items += parser.close()
    assert items == [SseEvent(data=payload), SseEvent(data="b")]
    # Linear: every character is scanned once (a rescan of the pending line per read would be ~n^2 / read_size).
    assert counter.scanned <= len(body)
