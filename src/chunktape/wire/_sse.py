"""Lossless, incremental Server-Sent Events parsing and writing (WHATWG "event stream" rules).

Feed the parser bytes exactly as they come off the network: a field, a line ending (CR LF split across two
reads) or a UTF-8 character may be split anywhere. Comments (``: keep-alive``, ``: OPENROUTER PROCESSING``)
are kept as ``SseComment`` items rather than dropped, so a recorder or a converter loses nothing; consumers
skip them. ``write_sse`` produces bytes that parse back to the same items.

Two deliberate, documented departures from the browser algorithm, both for losslessness:

- an event is dispatched when its block had *any* field (``event:``/``id:``/``retry:`` alone too); ``data``
  is ``None`` when no ``data:`` line was present, ``""`` for an empty one;
- ``id`` is the value sent in *this* event (the sticky last-event-id is ``SseParser.last_event_id``);
- ``close()`` still returns a final event whose terminating blank line never came (servers that end the body
  right after ``data: [DONE]\\n``; browsers drop it), but marks it: ``SseParser.unterminated`` is that event.
  A body cut mid-event (``data: {"cho``) ends the same way, so a consumer must not trust an unterminated event
  as complete: the OpenAI decoder reports a cut one as a broken stream (``STREAM_ABORTED``).

A stream may last as long as it likes, but one event may not: a line, or an event's data lines together, longer
than ``max_event`` characters (``MAX_EVENT_CHARS``, 64 Mi) is ``INVALID_RESPONSE``, raised by ``feed`` as soon as
it is known, so a server that never ends a line cannot fill memory.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable
from typing import Any

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._limits import MAX_EVENT_CHARS

__all__ = ["SseComment", "SseEvent", "SseItem", "SseParser", "json_event", "parse_sse", "write_sse"]

_EOL = re.compile(r"\r\n|\r|\n")
_DIGITS = re.compile(r"[0-9]+")
_json = msgspec.json.Encoder()


class SseEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One dispatched event: its ``data`` lines joined with ``\\n`` and the other fields as sent."""

    data: str | None = None
    event: str | None = None
    id: str | None = None
    retry: int | None = None


class SseComment(msgspec.Struct, frozen=True, kw_only=True):
    """A comment line (``: text``), with the one space after the colon removed."""

    text: str


SseItem = SseEvent | SseComment


class SseParser:
    """Incremental parser: ``feed(bytes)`` returns the items completed so far, ``close()`` the rest."""

    __slots__ = (
        "_bom_checked",
        "_data",
        "_data_size",
        "_decoder",
        "_event",
        "_id",
        "_max_event",
        "_pending",
        "_pending_size",
        "_retry",
        "_skip_lf",
        "last_event_id",
        "unterminated",
    )

    def __init__(self, *, max_event: int | None = None) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._max_event = MAX_EVENT_CHARS if max_event is None else max_event
        self._pending: list[str] = []
        """The current line so far (pieces without a line ending): joined once, when its ending arrives."""
        self._pending_size = 0
        self._data_size = 0
        """The characters of the current event's data lines so far."""
        self._skip_lf = False
        self._bom_checked = False
        self._data: list[str] | None = None
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None
        self.last_event_id = ""
        """The sticky last event id, as a browser's EventSource keeps it."""
        self.unterminated: SseEvent | None = None
        """Set by ``close()``: the final event it returned although its blank line never came (else None)."""

    def feed(self, chunk: bytes) -> list[SseItem]:
        """Parse the next bytes of the stream; returns every item they complete."""
        return self._feed_text(self._decoder.decode(chunk))

    def close(self) -> list[SseItem]:
        """End of stream: flush an undecodable tail, a final unterminated line and event.

        A final event without its terminating blank line is returned last and also kept in ``unterminated``:
        it may be complete (``data: [DONE]\\n`` then EOF) or cut mid-line (``data: {"cho``).
        """
        items = self._feed_text(self._decoder.decode(b"", final=True))
        if self._pending:
            line, self._pending = "".join(self._pending), []
            self._line(line, items)
        before = len(items)
        self._dispatch(items)
        if len(items) > before:
            last = items[-1]
            assert isinstance(last, SseEvent)
            self.unterminated = last
        return items

    def _feed_text(self, text: str) -> list[SseItem]:
        items: list[SseItem] = []
        if not text:
            return items
        if not self._bom_checked:
            self._bom_checked = True
            if text.startswith("\ufeff"):
                text = text[1:]
        if self._skip_lf:
            # The previous read ended with CR; an LF starting this one belongs to the same line ending.
            self._skip_lf = False
            if text.startswith("\n"):
                text = text[1:]
        # Only the new text is scanned: the pending piece holds no line ending, so a long line fed in small
        # reads costs linear time (a rescan of the whole pending line per read was quadratic).
        start = 0
        for match in _EOL.finditer(text):
            if self._pending:
                self._pending.append(text[start : match.start()])
                line, self._pending, self._pending_size = "".join(self._pending), [], 0
            else:
                line = text[start : match.start()]
            self._line(line, items)
            start = match.end()
        if start and text[start - 1] == "\r":
            self._skip_lf = start == len(text)
        if start < len(text):
            self._pending.append(text[start:] if start else text)
            self._pending_size += len(text) - start
            if self._pending_size + self._data_size > self._max_event:
                raise self._too_long()
        return items

    def _line(self, line: str, items: list[SseItem]) -> None:
        if not line:
            self._dispatch(items)
            return
        if len(line) > self._max_event:
            raise self._too_long()
        colon = line.find(":")
        if colon == 0:
            items.append(SseComment(text=line[2:] if line.startswith(": ") else line[1:]))
            return
        if colon < 0:
            field, value = line, ""
        else:
            field = line[:colon]
            value = line[colon + 2 :] if line.startswith(" ", colon + 1) else line[colon + 1 :]
        if field == "data":
            self._data_size += len(value) + 1
            if self._data_size > self._max_event:
                raise self._too_long()
            if self._data is None:
                self._data = [value]
            else:
                self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self._id = value
                self.last_event_id = value
        elif field == "retry" and _DIGITS.fullmatch(value):
            self._retry = int(value)
        # Unknown fields are ignored, as the standard says.

    def _dispatch(self, items: list[SseItem]) -> None:
        if self._data is None and self._event is None and self._id is None and self._retry is None:
            return
        data = "\n".join(self._data) if self._data is not None else None
        items.append(SseEvent(data=data, event=self._event, id=self._id, retry=self._retry))
        self._data = self._event = self._id = None
        self._retry = None
        self._data_size = 0

    def _too_long(self) -> LlmError:
        return LlmError(
            f"a server-sent event longer than {self._max_event:,} characters: a line or an event that never ends is "
            "a broken stream, not an answer",
            ErrorCode.INVALID_RESPONSE,
        )


def parse_sse(body: bytes) -> list[SseItem]:
    """Parse a whole body at once (a recorded response, a vcrpy cassette); ``INVALID_RESPONSE`` for an event past
    ``MAX_EVENT_CHARS``."""
    parser = SseParser()
    return parser.feed(body) + parser.close()


def write_sse(items: Iterable[SseItem]) -> bytes:
    """Serialise items so that ``parse_sse`` gives them back (``data`` line breaks come back as ``\\n``).

    Raises ``ValueError`` for what SSE cannot carry: a line break in a comment, ``event`` or ``id``, a NUL in
    an ``id``, a negative ``retry``, or an event with no field at all.
    """
    out: list[str] = []
    for item in items:
        if isinstance(item, SseComment):
            _single_line("comment", item.text)
            out.append(f": {item.text}\n\n")
            continue
        if item.data is None and item.event is None and item.id is None and item.retry is None:
            raise ValueError("an SSE event needs at least one field")
        if item.event is not None:
            _single_line("event", item.event)
            out.append(f"event: {item.event}\n")
        if item.id is not None:
            _single_line("id", item.id)
            if "\0" in item.id:
                raise ValueError("an SSE id cannot contain NUL")
            out.append(f"id: {item.id}\n")
        if item.retry is not None:
            if item.retry < 0:
                raise ValueError("an SSE retry must be >= 0")
            out.append(f"retry: {item.retry}\n")
        if item.data is not None:
            out.extend(f"data: {line}\n" for line in _EOL.split(item.data))
        out.append("\n")
    return "".join(out).encode()


def json_event(payload: Any, *, event: str | None = None) -> bytes:
    """One JSON value as an SSE event, as every protocol frames its events: the ``event:`` name when it has one (a
    name of one line), then the value on one ``data:`` line (compact JSON holds no line break)."""
    head = b"data: " if event is None else b"event: " + event.encode() + b"\ndata: "
    return head + _json.encode(payload) + b"\n\n"


def _single_line(field: str, value: str) -> None:
    if "\r" in value or "\n" in value:
        raise ValueError(f"an SSE {field} cannot contain a line break: {value!r}")
