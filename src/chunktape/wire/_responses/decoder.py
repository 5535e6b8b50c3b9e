"""The decoder of OpenAI Responses (provider -> us): the ``/v1/responses`` event stream -> StreamChunk.

One output item is one block: a ``message`` -> a text block, a ``reasoning`` item -> a reasoning block (its
summary parts as the deltas' ``part``, its ``encrypted_content`` on the block), a ``function_call`` -> a tool-call
block (``call_id`` is the call's id, the item's ``id`` the block's ``BlockStart.id``), any other ``*_call`` item
(``web_search_call``...) -> a server-tool-call block whose arguments are the item's own fields as it ended, and an
item of another type -> a server-tool-result block. An item that opens otherwise than ``default_item`` says keeps
its opening (``BlockStart.opening["responses"]``).

``output_text.delta`` -> ``TextDelta`` (``part``: the ``content_index`` when not 0), ``output_text.annotation.added``
-> ``TextDelta(text="", citation=...)``, ``reasoning_summary_text.delta`` -> ``ReasoningDelta`` (``part``: the
``summary_index``), ``function_call_arguments.delta`` -> ``ToolCallDelta``. The events a replay derives from the
blocks (``response.in_progress``, ``content_part.*``, ``*.done``, ``reasoning_summary_part.*``) are read, not kept;
every other event (``web_search_call.searching``, refusal parts, a type newer than this library) passes through
untouched as ``ProviderEvent``. ``response.completed`` / ``response.incomplete`` give the usage and the finish
(``tool-calls`` when the response called a function; ``length`` for ``max_output_tokens``); an ``error`` event or
``response.failed`` raises (``PROVIDER_HTTP_ERROR`` with the status its code means, else ``STREAM_ABORTED``); a body
that ends before a terminal event is ``STREAM_ABORTED``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._json_prefix import unfinished_json
from chunktape._protocol import (
    BlockEnd,
    BlockStart,
    BlockType,
    CallId,
    FinishReason,
    ProviderEvent,
    ReasoningBlock,
    ReasoningDelta,
    ServerToolCallBlock,
    ServerToolResultBlock,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
)
from chunktape.wire._decoding import decode_body, ending, event_object, invalid, require_finished
from chunktape.wire._http_errors import snippet
from chunktape.wire._responses.fields import ERROR_STATUS, PROTOCOL, default_item, finish_from_wire, usage_from_wire
from chunktape.wire._sse import SseComment, SseItem

__all__ = ["ResponsesDecoder", "decode_responses_response", "decode_responses_sse", "error_from_responses"]

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_DERIVED = frozenset(
    {
        "response.in_progress",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.function_call_arguments.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
    }
)
"""Events a replay derives from the blocks: read, not kept."""
_ITEM_FIELDS = frozenset({"id", "type", "status"})
_CARRIED = frozenset({"output", "usage", "status", "incomplete_details"})
"""What a terminal response holds that the chunks carry."""


def error_from_responses(error: Any, *, what: str = "the provider reported an error mid-stream") -> LlmError:
    """An ``error`` event or a failed response's ``error`` (``{"code", "message"}``) as an ``LlmError``."""
    code = error.get("code") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    text = message if isinstance(message, str) and message.strip() else _encoder.encode(error).decode()
    notes = [code, what] if isinstance(code, str) and code and code not in text else [what]
    full = f"{text} ({'; '.join(notes)})"
    status = ERROR_STATUS.get(code) if isinstance(code, str) else None
    if status is not None:
        return LlmError(full, ErrorCode.PROVIDER_HTTP_ERROR, status=status)
    return LlmError(full, ErrorCode.STREAM_ABORTED)


class _Item:
    __slots__ = ("call_id", "citations", "id", "index", "kind", "name", "pieces", "wire_type")

    def __init__(self, kind: BlockType, index: int, id: str, wire_type: str) -> None:
        self.kind = kind
        self.index = index
        self.id = id
        self.wire_type = wire_type
        self.pieces: list[str] = []
        self.citations: list[Any] | None = None
        self.call_id = ""
        self.name = ""


class ResponsesDecoder:
    """Stateful decoder: feed SSE items (or event JSON), get StreamChunks; ``close()`` at the end of the body."""

    __slots__ = ("_done", "_ended_early", "_finish", "_next", "_open", "_tool_calls", "_usage", "response", "terminal")

    def __init__(self) -> None:
        self._next = 0
        self._open: _Item | None = None
        self._ended_early: set[str] = set()
        """Items a later item's ``output_item.added`` ended before their own ``output_item.done`` came."""
        self._usage: dict[str, Any] | None = None
        self._finish: FinishReason | None = None
        self._tool_calls = False
        self._done = False
        self.response: dict[str, Any] | None = None
        """``response.created``'s response, as sent, once it came (its id, model, ``created_at``...)."""
        self.terminal: dict[str, Any] = {}
        """The fields the terminal event's response changed, beyond the output, usage and status the chunks
        carry (``completed_at``, the ``service_tier`` that served it)."""

    @property
    def done(self) -> bool:
        """True once a terminal event (``response.completed`` / ``response.incomplete``) arrived."""
        return self._done

    def feed_item(self, item: SseItem, *, unterminated: bool = False) -> list[StreamChunk]:
        if isinstance(item, SseComment) or item.data is None:
            return []
        return self.feed_data(item.data, event=item.event, unterminated=unterminated)

    def feed_data(self, data: str, *, event: str | None = None, unterminated: bool = False) -> list[StreamChunk]:
        if not data.strip():
            return []
        payload = event_object(data, unterminated=unterminated)
        kind = payload.get("type") if isinstance(payload.get("type"), str) else event
        out: list[StreamChunk] = []
        if kind == "error":
            raise error_from_responses(payload.get("error", payload))
        if kind == "response.failed":
            response = payload.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            raise error_from_responses(error or payload, what="the response failed")
        if kind in _DERIVED:
            return out
        match kind:
            case "response.created":
                response = payload.get("response")
                if isinstance(response, dict):
                    self.response = response
            case "response.output_item.added":
                self._added(payload.get("item"), out)
            case "response.output_text.delta":
                item, text = self._piece(payload, "text", data, "output_text.delta without a text delta")
                out.append(TextDelta(index=item.index, text=text, part=_part(payload.get("content_index"))))
            case "response.output_text.annotation.added":
                item = self._current(payload, "text", data)
                annotation = payload.get("annotation")
                item.citations = [*(item.citations or []), annotation]
                out.append(
                    TextDelta(index=item.index, text="", citation=annotation, part=_part(payload.get("content_index")))
                )
            case "response.reasoning_summary_text.delta":
                item, text = self._piece(
                    payload, "reasoning", data, "reasoning_summary_text.delta without a text delta"
                )
                out.append(ReasoningDelta(index=item.index, text=text, part=_part(payload.get("summary_index"))))
            case "response.function_call_arguments.delta":
                item, piece = self._piece(payload, "tool-call", data, "function_call_arguments.delta without a delta")
                out.append(ToolCallDelta(index=item.index, arguments_delta=piece))
            case "response.output_item.done":
                self._done_item(payload.get("item"), out)
            case "response.completed" | "response.incomplete":
                self._end_open(out)
                response = payload.get("response")
                if not isinstance(response, dict):
                    raise invalid(f"{kind} without a response: {snippet(data)}")
                usage = response.get("usage")
                if isinstance(usage, dict):
                    self._usage = usage
                created = self.response or {}
                self.terminal = {
                    key: value
                    for key, value in response.items()
                    if key not in _CARRIED and (key not in created or created[key] != value)
                }
                status = response.get("status")
                self._finish = finish_from_wire(
                    status if isinstance(status, str) else kind.removeprefix("response."),
                    response.get("incomplete_details"),
                    tool_calls=self._tool_calls,
                )
                self._done = True
            case _:
                out.append(ProviderEvent(protocol=PROTOCOL, event=event, data=data))
        return out

    def close(self) -> list[StreamChunk]:
        require_finished(self._done)
        out: list[StreamChunk] = []
        self._end_open(out)
        assert self._finish is not None
        usage = usage_from_wire(self._usage) if self._usage is not None else None
        return out + ending(usage, self._finish)

    # -- items ---------------------------------------------------------------------------------------

    def _current(self, payload: Mapping[str, Any], kind: BlockType, data: str) -> _Item:
        item = self._open
        if item is None or item.kind != kind:
            raise invalid(f"{payload.get('type')} outside a {kind} item: {snippet(data)}")
        item_id = payload.get("item_id")
        if isinstance(item_id, str) and item_id != item.id:
            raise invalid(f"{payload.get('type')} for item {item_id!r} inside item {item.id!r}")
        return item

    def _piece(self, payload: Mapping[str, Any], kind: BlockType, data: str, missing: str) -> tuple[_Item, str]:
        """The open ``kind`` item and the piece of it a ``*.delta`` event carries: a string, else ``missing``."""
        item = self._current(payload, kind, data)
        piece = payload.get("delta")
        if not isinstance(piece, str):
            raise invalid(f"{missing}: {snippet(data)}")
        item.pieces.append(piece)
        return item, piece

    def _added(self, item: Any, out: list[StreamChunk]) -> None:
        if self._open is not None:  # a provider that opens the next item first (OpenRouter) says done later
            self._ended_early.add(self._open.id)
        self._end_open(out)
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise invalid(f"output_item.added without an item: {snippet(repr(item))}")
        wire_type: str = item["type"]
        given = item.get("id")
        item_id: str = given if isinstance(given, str) else f"item_{self._next}"
        kind: BlockType
        if wire_type == "message":
            kind = "text"
        elif wire_type == "reasoning":
            kind = "reasoning"
        elif wire_type == "function_call":
            kind = "tool-call"
        elif wire_type.endswith("_call"):
            kind = "server-tool-call"
        else:
            kind = "server-tool-result"
        index = self._next
        self._next += 1
        current = self._open = _Item(kind, index, item_id, wire_type)
        opening = dict(item)
        if kind == "tool-call" and opening.get("arguments"):
            opening["arguments"] = ""  # streamed as the first piece below
        call_id, name = item.get("call_id"), item.get("name")
        default = default_item(
            wire_type,
            id=item_id,
            call_id=call_id if isinstance(call_id, str) else None,
            name=name if isinstance(name, str) else None,
        )
        out.append(
            BlockStart(
                index=index,
                block_type=kind,
                id=item_id,
                opening={} if opening == default else {PROTOCOL: opening},
            )
        )
        if kind == "tool-call":
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise invalid(f"a function_call item without a call_id and a name: {snippet(repr(item))}")
            current.call_id, current.name = call_id, name
            self._tool_calls = True
            out.append(ToolCallDelta(index=index, id=CallId(call_id), name=name, arguments_delta=""))
            if isinstance(item.get("arguments"), str) and item["arguments"]:
                current.pieces.append(item["arguments"])
                out.append(ToolCallDelta(index=index, arguments_delta=item["arguments"]))
        elif kind == "server-tool-call":
            current.call_id, current.name = item_id, wire_type.removesuffix("_call")
            out.append(ToolCallDelta(index=index, id=CallId(item_id), name=current.name, arguments_delta=""))

    def _done_item(self, item: Any, out: list[StreamChunk]) -> None:
        current = self._open
        late = item.get("id") if isinstance(item, dict) else None
        if late in self._ended_early and (current is None or current.id != late):
            self._ended_early.discard(late)  # its block ended when the next item opened: nothing is left to end
            return
        if current is None or not isinstance(item, dict):
            raise invalid(f"output_item.done without an open item: {snippet(repr(item))}")
        if isinstance(item.get("id"), str) and item["id"] != current.id:
            raise invalid(f"output_item.done for item {item['id']!r} inside item {current.id!r}")
        self._open = None
        text = "".join(current.pieces)
        ended: Any
        match current.kind:
            case "text":
                ended = TextBlock(text=text, citations=current.citations)
            case "reasoning":
                encrypted = item.get("encrypted_content")
                ended = ReasoningBlock(text=text, encrypted=encrypted if isinstance(encrypted, str) else None)
            case "tool-call":
                if not text:
                    done = item.get("arguments")
                    text = done if isinstance(done, str) and done else "{}"
                    out.append(ToolCallDelta(index=current.index, arguments_delta=text))
                try:
                    _decoder.decode(text)
                    cut = False
                except msgspec.DecodeError:
                    # An item max_output_tokens cut is "incomplete": its arguments stop where the limit fell.
                    if item.get("status") != "incomplete" or not unfinished_json(text):
                        raise invalid(
                            f"function call {current.name!r} has arguments that are not valid JSON: {snippet(text)}"
                        ) from None
                    cut = True
                ended = ToolCallBlock(id=CallId(current.call_id), name=current.name, arguments=text, cut=cut)
            case "server-tool-call":
                fields = {key: value for key, value in item.items() if key not in _ITEM_FIELDS}
                arguments = _encoder.encode(fields).decode()
                out.append(ToolCallDelta(index=current.index, arguments_delta=arguments))
                ended = ServerToolCallBlock(id=current.call_id, name=current.name, arguments=arguments)
            case _:
                ended = ServerToolResultBlock(tool_use_id=current.id, content=item)
        out.append(BlockEnd(index=current.index, block=ended))

    def _end_open(self, out: list[StreamChunk]) -> None:
        """An item the provider never said was done (the stream ended with it open) ends as it stands."""
        current = self._open
        if current is None:
            return
        fallback: dict[str, Any] = {"id": current.id, "type": current.wire_type}
        if current.kind == "tool-call":
            fallback["arguments"] = "".join(current.pieces)
        self._done_item(fallback, out)


def _part(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def decode_responses_sse(body: bytes) -> list[StreamChunk]:
    """Decode a whole recorded ``/v1/responses`` event stream into StreamChunks."""
    return decode_body(body, ResponsesDecoder())


def decode_responses_response(body: bytes | str | Mapping[str, Any]) -> list[StreamChunk]:
    """A non-streamed ``response`` object as the chunks its stream would give (each output item as one block)."""
    try:
        response: Any = _decoder.decode(body) if isinstance(body, bytes | str) else body
    except msgspec.DecodeError as exc:
        raise invalid(f"not a response object: {exc}") from exc
    if not isinstance(response, dict) or not isinstance(response.get("output"), list):
        raise invalid("not a response object: `output` must be a list")
    if response.get("status") == "failed" or response.get("error"):
        raise error_from_responses(response.get("error"), what="the response failed")
    decoder = ResponsesDecoder()
    events: list[dict[str, Any]] = [{"type": "response.created", "response": response}]
    for item in response["output"]:
        if not isinstance(item, dict):
            raise invalid("an output item is not an object")
        added = dict(item)
        match item.get("type"):
            case "message":
                added.update(status="in_progress", content=[])
                events.append({"type": "response.output_item.added", "item": added})
                for position, part in enumerate(item.get("content") or ()):
                    if isinstance(part, dict) and part.get("type") == "output_text":
                        delta = {"type": "response.output_text.delta", "content_index": position}
                        events.append({**delta, "delta": part.get("text", "")})
                        for annotation in part.get("annotations") or ():
                            added_annotation = {"type": "response.output_text.annotation.added"}
                            events.append({**added_annotation, "content_index": position, "annotation": annotation})
            case "reasoning":
                added["summary"] = []
                added.pop("encrypted_content", None)
                events.append({"type": "response.output_item.added", "item": added})
                for position, part in enumerate(item.get("summary") or ()):
                    if isinstance(part, dict):
                        delta = {"type": "response.reasoning_summary_text.delta", "summary_index": position}
                        events.append({**delta, "delta": part.get("text", "")})
            case "function_call":
                added.update(status="in_progress", arguments="")
                events.append({"type": "response.output_item.added", "item": added})
                arguments = item.get("arguments")
                events.append({"type": "response.function_call_arguments.delta", "delta": arguments or "{}"})
            case _:
                events.append({"type": "response.output_item.added", "item": {**added, "status": "in_progress"}})
        events.append({"type": "response.output_item.done", "item": item})
    status = response.get("status")
    terminal = "response.incomplete" if status == "incomplete" else "response.completed"
    events.append({"type": terminal, "response": response})
    out: list[StreamChunk] = []
    for event in events:
        out.extend(decoder.feed_data(_encoder.encode(event).decode()))
    out.extend(decoder.close())
    return out
