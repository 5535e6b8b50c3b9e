"""Property tests over everything that reads bytes or chunks it did not write itself.

The cassette decoders (random and mutated valid files, both encodings), the lazy JSON open (it must agree
with the full decode), the crash-journal reader and the validator: only documented ``LlmError`` codes come
out, never another exception, and nothing hangs (each example has a deadline far above its normal cost).
``benchmarks/fuzz.py`` is the coverage-guided (atheris) counterpart; its findings are pinned here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunktape import (
    BlockEnd,
    BlockStart,
    CallId,
    Cancelled,
    Cassette,
    CassetteMeta,
    Completed,
    ErrorCode,
    Finish,
    FinishReason,
    LlmError,
    Outcome,
    Raised,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    StreamValidator,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
    load_cassette,
    open_cassette,
    recover,
    save_cassette,
)
from chunktape._cassettes.codec import encode_cassette
from chunktape._cassettes.journal import Journal, journal_path
from chunktape.wire._openai_chat import OpenAIChatDecoder, chunks_to_openai_events
from chunktape.wire._sse import SseParser
from helpers import cassette_of, interaction_of, text_stream
from strategies import valid_streams

FUZZ = settings(
    max_examples=80,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZED = settings(FUZZ, max_examples=40)
"""For properties ``benchmarks/fuzz.py`` checks too (the same promise, coverage-guided): fewer examples here."""
DECODE_CODES = {ErrorCode.CASSETTE_CORRUPT, ErrorCode.CASSETTE_VERSION}
REGRESSIONS = Path(__file__).parent / "fuzz_regressions"


_outcomes: st.SearchStrategy[Outcome] = st.sampled_from(
    [
        Completed(t_ns=10**9),
        Cancelled(t_ns=5, reason="consumer closed the stream"),
        Raised(t_ns=7, code="PROVIDER_HTTP_ERROR", message="slow down", status=429, retry_after=1.0),
    ]
)
_streams = valid_streams()
_contents = st.text(max_size=20)
_interaction_counts = st.integers(0, 3)


@st.composite
def cassettes(draw: st.DrawFn) -> Cassette:
    interactions = []
    for number in range(draw(_interaction_counts)):
        chunks = draw(_streams)
        if draw(st.booleans()):
            chunks = chunks[: draw(st.integers(0, len(chunks)))]
        outcome = draw(_outcomes)
        content = draw(_contents) + f" #{number}"
        interactions.append(interaction_of(chunks, outcome, content=content, gap_ns=1_000))
    return Cassette(meta=CassetteMeta(adapter="fuzz"), interactions=interactions)


def _outcome(path: Path, how: str) -> tuple[str, Any]:
    """("ok", cassette) or ("error", code) for one way of reading ``path``; anything else propagates."""
    failure: LlmError | None = None
    try:
        if how == "load":
            return "ok", load_cassette(path).interactions
        return "ok", open_cassette(path).to_cassette().interactions
    except LlmError as error:
        failure = error
    assert failure.code in DECODE_CODES, failure
    assert str(path) in str(failure)
    return "error", failure.code


def _recover_code(path: Path) -> ErrorCode | None:
    try:
        recover(path)
    except LlmError as error:
        return error.code
    return None


def _mutate(data: bytes, draw: Callable[[st.SearchStrategy[Any]], Any]) -> bytes:
    buffer = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "duplicate"]))
        at = draw(st.integers(0, max(0, len(buffer) - 1)))
        if kind == "flip" and buffer:
            buffer[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and buffer:
            buffer[at] = draw(st.sampled_from(b'\x00\xff\x7f\x80\xc0\xdc\xdd"[]{}:,0 \n\\'))
        elif kind == "insert":
            buffer[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del buffer[at : at + draw(st.integers(1, 16))]
        elif kind == "truncate":
            del buffer[at:]
        elif kind == "duplicate":
            buffer[at:at] = buffer[at : at + draw(st.integers(1, 64))]
    return bytes(buffer)


@FUZZED  # fuzz.py: msgpack/json targets
@given(cassette=cassettes(), suffix=st.sampled_from([".msgpack", ".json"]), data=st.data())
def test_mutated_valid_cassettes_decode_or_raise_a_documented_code(
    tmp_path: Path, cassette: Cassette, suffix: str, data: st.DataObject
) -> None:
    mutated = _mutate(encode_cassette(cassette, f"source{suffix}"), data.draw)
    path = tmp_path / f"mutated{suffix}"
    path.write_bytes(mutated)
    full = _outcome(path, "load")
    lazy = _outcome(path, "open")
    # The lazy path may only differ by failing where the full decode succeeded: never different chunks.
    if full[0] == "ok" and lazy[0] == "ok":
        assert lazy[1] == full[1]
    elif lazy[0] == "ok":
        pytest.fail(f"open_cassette accepted a file load_cassette refused ({full[1]})")


@FUZZED  # fuzz.py: msgpack/json targets
@given(data=st.binary(max_size=2000), suffix=st.sampled_from([".msgpack", ".json"]))
def test_random_bytes_after_a_valid_prefix_raise_a_documented_code(tmp_path: Path, data: bytes, suffix: str) -> None:
    path = tmp_path / f"random{suffix}"
    path.write_bytes(encode_cassette(Cassette(), path)[: len(data) % 40] + data)
    _outcome(path, "load")
    _outcome(path, "open")


def test_fuzz_regressions_stay_fixed(tmp_path: Path) -> None:
    """Inputs ``benchmarks/fuzz.py`` once crashed on (first byte: the target; 0 msgpack, 1 JSON, 2 journal...)."""
    found = sorted(REGRESSIONS.iterdir())
    assert found
    for case in found:
        raw = case.read_bytes()
        suffix = {0: ".msgpack", 1: ".json"}.get(raw[0] % 6)
        if suffix is None:
            continue
        path = tmp_path / f"{case.stem}{suffix}"
        path.write_bytes(raw[1:])
        assert _outcome(path, "load") == _outcome(path, "open"), case.name


# -- the lazy JSON open ----------------------------------------------------------------------------


@settings(max_examples=40, deadline=timedelta(seconds=5), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cassette=cassettes())
def test_json_open_slices_the_layout_we_write_and_agrees_with_any_other_layout(
    tmp_path: Path, cassette: Cassette
) -> None:
    path = tmp_path / "c.json"
    data = encode_cassette(cassette, path)  # what save_cassette writes, without its fsyncs
    path.write_bytes(data)
    if any(item.events for item in cassette.interactions):
        # The fast path is taken for our own files: it leaves the events untokenised until played, so bytes
        # spoiled inside an events array open fine and fail only when that interaction is decoded (the full
        # scan would refuse the file at open).
        first = next(number for number, item in enumerate(cassette.interactions) if item.events)
        spoiled = tmp_path / "spoiled.json"
        spoiled.write_bytes(data.replace(b'"events": [\n', b'"events": [\n@', 1))
        lazy = open_cassette(spoiled)
        with pytest.raises(LlmError) as caught:
            lazy.interaction(first)
        assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    assert open_cassette(path).to_cassette().interactions == cassette.interactions
    plain = msgspec.json.encode(cassette)
    for layout in (plain, msgspec.json.format(plain, indent=4), data.replace(b"\n", b"\r\n"), b" " + data):
        path.write_bytes(layout)
        assert open_cassette(path).to_cassette().interactions == cassette.interactions


def _two_interactions() -> Cassette:
    chunks = text_stream("a ] [", "b")
    return cassette_of(
        *(interaction_of(chunks, Completed(t_ns=99), content=f"q{n}", gap_ns=1, start_ns=0) for n in range(2))
    )


def test_a_damaged_events_array_in_json_is_reported_when_played(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    save_cassette(_two_interactions(), path)
    data = path.read_bytes()
    first_event = data.index(b'"tNs"')
    path.write_bytes(data[:first_event] + b'"tNs": "soon",' + data[first_event:])
    lazy = open_cassette(path)  # matching needs only the requests
    assert len(lazy) == 2
    assert lazy.interaction(1).chunks == _two_interactions().interactions[1].chunks
    with pytest.raises(LlmError) as caught:
        lazy.interaction(0)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    assert "interaction #0" in str(caught.value)


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param((b'"events": [\n        {', b'"events": [ {'), id="events-opened-mid-line"),
        pytest.param((b"}\n      ],", b"}],"), id="events-closed-mid-line"),
        pytest.param((b"}\n      ],", b"} ],"), id="events-closed-with-a-space"),
    ],
)
def test_hand_edited_json_layouts_fall_back_to_the_full_scan(tmp_path: Path, edit: tuple[bytes, bytes]) -> None:
    cassette = _two_interactions()
    path = tmp_path / "c.json"
    save_cassette(cassette, path)
    old, new = edit
    path.write_bytes(path.read_bytes().replace(old, new, 1))
    assert load_cassette(path).interactions == cassette.interactions
    assert open_cassette(path).to_cassette().interactions == cassette.interactions


# -- the journal -------------------------------------------------------------------------------------


def _journal_bytes(tmp_path: Path, cassette: Cassette) -> bytes:
    journal = Journal(journal_path(tmp_path / "j.msgpack"), cassette.meta)
    for ident, interaction in enumerate(cassette.interactions):
        journal.begin(ident, interaction.request, interaction.started_at, interaction.attempt)
        for event in interaction.events:
            journal.event(ident, event.t_ns, event.chunk)
        journal.end(ident, interaction.outcome)
    journal.close(remove=False)
    data = journal.path.read_bytes()
    journal.path.unlink()
    return data


@FUZZ
@given(cassette=cassettes(), cut=st.integers(0, 10**6))
def test_a_journal_cut_anywhere_recovers_a_prefix_of_what_was_written(
    tmp_path: Path, cassette: Cassette, cut: int
) -> None:
    data = _journal_bytes(tmp_path, cassette)
    path = tmp_path / "cut.journal"
    cut %= len(data) + 1
    path.write_bytes(data[:cut])
    if cut == 0:  # an empty file is not a journal: nothing to recover, and `recover` says so
        assert _recover_code(path) is ErrorCode.CASSETTE_CORRUPT
        return
    recovered = recover(path)
    assert len(recovered.interactions) <= len(cassette.interactions)
    for got, wrote in zip(recovered.interactions, cassette.interactions, strict=False):
        assert got.request == wrote.request
        assert got.events == wrote.events[: len(got.events)]
        if got.outcome != wrote.outcome:
            assert isinstance(got.outcome, Cancelled)
            validator = StreamValidator(require_finish=False)
            for chunk in got.chunks:
                validator.feed(chunk)


@FUZZED  # fuzz.py: journal target
@given(cassette=cassettes(), data=st.data())
def test_a_mutated_journal_recovers_or_raises_corrupt(tmp_path: Path, cassette: Cassette, data: st.DataObject) -> None:
    path = tmp_path / "mutated.journal"
    path.write_bytes(_mutate(_journal_bytes(tmp_path, cassette), data.draw))
    assert _recover_code(path) in (None, ErrorCode.CASSETTE_CORRUPT)


@FUZZED  # fuzz.py: journal target
@given(data=st.binary(max_size=500))
def test_random_journal_bytes_recover_or_raise_corrupt(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "random.journal"
    path.write_bytes(data)
    assert _recover_code(path) in (None, ErrorCode.CASSETTE_CORRUPT)


# -- the validator -------------------------------------------------------------------------------------

_index = st.integers(-2, 3)
_text = st.text(max_size=6)
_call_id = st.none() | st.sampled_from([CallId("call_a"), CallId("call_b")])
_block = st.one_of(
    st.builds(TextBlock, text=_text),
    st.builds(ReasoningBlock, text=_text),
    st.builds(ToolCallBlock, id=st.sampled_from([CallId("call_a")]), name=_text, arguments=_text),
)
any_chunk: st.SearchStrategy[StreamChunk] = st.one_of(
    st.builds(BlockStart, index=_index, block_type=st.sampled_from(["text", "tool-call", "reasoning"])),
    st.builds(TextDelta, index=_index, text=_text),
    st.builds(ReasoningDelta, index=_index, text=_text),
    st.builds(ToolCallDelta, index=_index, id=_call_id, name=st.none() | _text, arguments_delta=_text),
    st.builds(BlockEnd, index=_index, block=_block),
    st.builds(
        UsageChunk, usage=st.builds(TokenUsage, input_tokens=st.integers(-1, 9), output_tokens=st.integers(-1, 9))
    ),
    st.builds(Finish, reason=st.builds(FinishReason, kind=st.sampled_from(["stop", "error", "cancelled"]))),
)


@settings(max_examples=150, deadline=timedelta(seconds=2))  # fuzz.py: journal target, validator over what it recovers
@given(chunks=st.lists(any_chunk, max_size=20), require_finish=st.booleans())
def test_any_chunk_sequence_passes_or_raises_protocol_violation(
    chunks: list[StreamChunk], require_finish: bool
) -> None:
    validator = StreamValidator(require_finish=require_finish)
    code = None
    try:
        for chunk in chunks:
            validator.feed(chunk)
        validator.close()
    except LlmError as error:
        code = error.code
    assert code in (None, ErrorCode.PROTOCOL_VIOLATION)


# -- the wire: SSE parser and OpenAI chunk decoder ---------------------------------------------------

WIRE_CODES = {ErrorCode.INVALID_RESPONSE, ErrorCode.STREAM_ABORTED, ErrorCode.PROVIDER_HTTP_ERROR}


def _decode_body(body: bytes, cuts: list[int]) -> list[StreamChunk]:
    """What the adapter does with a body arriving in pieces: SSE items into the chunk decoder."""
    parser, decoder = SseParser(), OpenAIChatDecoder()
    chunks: list[StreamChunk] = []
    bounds = sorted({0, len(body), *(cut % (len(body) + 1) for cut in cuts)})
    for start, end in itertools.pairwise(bounds):
        for item in parser.feed(body[start:end]):
            chunks += decoder.feed_item(item)
    for item in parser.close():
        chunks += decoder.feed_item(item)
    return chunks + decoder.close()


def _assert_wire_outcome(body: bytes, cuts: list[int]) -> None:
    """Decoding gives a valid stream, or raises one of the documented wire codes (never a protocol violation)."""
    try:
        chunks = _decode_body(body, cuts)
    except LlmError as error:
        failure: LlmError | None = error
    else:
        failure = None
        validator = StreamValidator(require_finish=False)
        for chunk in chunks:
            validator.feed(chunk)  # a ProtocolViolation here fails the test: the decoder emitted an invalid stream
    if failure is not None:
        assert failure.code in WIRE_CODES, failure


@settings(max_examples=100, deadline=None)  # fuzz.py: wire target, the same check
@given(body=st.binary(max_size=600), cuts=st.lists(st.integers(0, 600), max_size=8))
def test_random_bytes_through_sse_and_the_decoder_give_only_documented_errors(body: bytes, cuts: list[int]) -> None:
    _assert_wire_outcome(body, cuts)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # fuzz.py: wire target
@given(
    chunks=valid_streams(),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.binary(max_size=3)), min_size=1, max_size=4),
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
)
def test_mutated_provider_bodies_give_a_valid_prefix_or_a_documented_error(
    chunks: list[StreamChunk], edits: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    body = bytearray(b"".join(chunks_to_openai_events(chunks, model="m")))
    for at, replacement in edits:
        at %= len(body) + 1
        body[at : at + len(replacement)] = replacement
    _assert_wire_outcome(bytes(body), cuts)
