"""The decoder of OpenAI chat completions (provider -> us): ``chat.completion.chunk`` JSON and SSE -> StreamChunk.

``OpenAIChatDecoder`` turns chunk JSON into a *valid* StreamChunk sequence:

- ``delta.reasoning_content`` (DeepSeek) or ``delta.reasoning`` (OpenRouter, Groq) -> a reasoning block,
  ``delta.content`` -> a text block; empty strings, ``null`` and ``delta: {}`` are ignored. A ``content`` that is
  a list of parts (Mistral) is read part by part: ``text`` as text, ``thinking`` as reasoning; any other part
  raises ``INVALID_RESPONSE`` rather than being dropped.
- ``delta.tool_calls[i]`` -> one tool-call block per provider ``index``. The protocol forbids interleaved
  blocks, but providers may interleave calls by index, so: the first call streams live; a delta for another
  index is buffered. The live call is closed (and the next buffered call, lowest index first, goes live with
  its buffered pieces replayed as they came) once a different index has arrived *and* the live call's
  arguments are complete JSON. Anything still open or buffered is flushed, in index order, when the
  tool-call phase ends (text/reasoning resumes, or the stream finishes). In-order providers therefore stream
  every call live; interleaving ones are delayed, never invalid. A new non-empty ``id`` at an index a
  different call already used starts a new call (ollama, litellm and dynamo send every parallel call as
  index 0). A delta arriving for a call already closed raises ``INVALID_RESPONSE`` unless it is empty.
- ``usage`` (on the last content chunk as DeepSeek sends it, or in a ``choices: []`` chunk after the finish
  chunk as OpenAI does, or in ``x_groq.usage`` as Groq does) -> ``UsageChunk``; ``finish_reason`` -> ``Finish``.
  Both are held until the stream ends (``[DONE]`` or end of body), so ``usage`` always precedes ``finish``.
- An in-band ``"error"`` object, or an ``event: error``, raises ``LlmError`` with the provider's message:
  ``PROVIDER_HTTP_ERROR`` with ``status`` when the payload carries an HTTP-like status (``code: 400``,
  ``status_code``), else ``STREAM_ABORTED`` (the provider gave up mid-stream; a retry may help).
  Unparseable data raises ``INVALID_RESPONSE``.

``decode_openai_sse`` decodes a whole recorded body; ``decode_openai_completion`` a non-streamed ``chat.completion``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._json_prefix import unfinished_json
from chunktape._protocol import (
    BlockEnd,
    BlockStart,
    CallId,
    FinishReason,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
)
from chunktape.wire._decoding import decode_body, decode_event, ending, require_finished
from chunktape.wire._http_errors import error_from_payload, snippet
from chunktape.wire._openai_chat.fields import DONE, WireUsage, finish_from_wire, usage_from_wire
from chunktape.wire._sse import SseComment, SseItem

__all__ = [
    "ChatChunk",
    "OpenAIChatDecoder",
    "decode_chat_chunk",
    "decode_openai_completion",
    "decode_openai_sse",
]

# -- the provider's JSON, typed and lenient (unknown fields are ignored) ----------------------------


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(msgspec.Struct):
    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | list[Any] | None = None
    """A string, or (Mistral) a list of ``text`` / ``thinking`` parts."""
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Groq(msgspec.Struct):
    usage: WireUsage | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: WireUsage | None = None
    x_groq: _Groq | None = None
    """Groq sends the stream's usage here, on the finish chunk."""
    error: Any = None


class _Message(msgspec.Struct):
    content: str | list[Any] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _CompletionChoice(msgspec.Struct):
    index: int = 0
    message: _Message | None = None
    finish_reason: str | None = None


class _Completion(msgspec.Struct):
    choices: list[_CompletionChoice] | None = None
    usage: WireUsage | None = None


_chunk_decoder = msgspec.json.Decoder(_Chunk)

ChatChunk = _Chunk
"""One ``chat.completion.chunk`` JSON object, typed and lenient, for code that inspects events as they pass."""


def decode_chat_chunk(data: str | bytes) -> ChatChunk:
    """One ``data:`` payload as a ``ChatChunk``; raises ``msgspec.DecodeError`` when it is not one."""
    return _chunk_decoder.decode(data)


_completion_decoder = msgspec.json.Decoder(_Completion)
_any_decoder = msgspec.json.Decoder()


# -- decoding ---------------------------------------------------------------------------------------


class _Call:
    """One provider tool call (by its ``index``): what we know and, while not live, its buffered pieces."""

    __slots__ = ("block_index", "id", "name", "pieces", "state")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.pieces: list[tuple[str | None, str | None, str]] = []
        self.state: Literal["buffered", "live", "done"] = "buffered"
        self.block_index = -1


class OpenAIChatDecoder:
    """Stateful decoder: feed SSE items (or chunk JSON), get StreamChunks; ``close()`` at the end of the body.

    Every chunk list returned, concatenated, is a stream that satisfies ``validate()``; a failure raises
    ``LlmError`` (the chunks returned before it stay valid so far).
    """

    __slots__ = (
        "_block",
        "_block_type",
        "_calls",
        "_current",
        "_done",
        "_finish",
        "_live",
        "_next_index",
        "_pieces",
        "_usage",
    )

    def __init__(self) -> None:
        self._next_index = 0
        self._block = -1
        self._block_type: Literal["text", "reasoning", "tool-call"] | None = None
        self._pieces: list[str] = []
        self._calls: dict[tuple[int, int], _Call] = {}
        """Every call by (provider index, how many earlier calls reused that index)."""
        self._current: dict[int, tuple[int, int]] = {}
        """Provider index -> the key of the latest call sent with it."""
        self._live: _Call | None = None
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None
        self._done = False

    @property
    def done(self) -> bool:
        """True once ``data: [DONE]`` arrived."""
        return self._done

    def feed_item(self, item: SseItem, *, unterminated: bool = False) -> list[StreamChunk]:
        """Decode one SSE item: comments are skipped, ``event: error`` raises, ``[DONE]`` ends the stream.

        ``unterminated``: the item is ``SseParser.unterminated`` (the body ended before its blank line); if its
        data does not parse, the body was cut mid-event: ``STREAM_ABORTED``, not ``INVALID_RESPONSE``.
        """
        if isinstance(item, SseComment) or item.data is None:
            return []
        if item.event == "error":
            try:
                payload: Any = _any_decoder.decode(item.data)
            except msgspec.DecodeError:
                payload = item.data
            raise error_from_payload(payload, what="the provider sent an error event")
        return self.feed_data(item.data, unterminated=unterminated)

    def feed_data(self, data: str | bytes, *, unterminated: bool = False) -> list[StreamChunk]:
        """Decode one ``data:`` payload (a chunk JSON object, or ``[DONE]``); ``unterminated`` as in ``feed_item``."""
        stripped = data.strip()
        if not stripped:
            return []  # a blank ``data:`` line, as some proxies send to keep the connection alive
        if self._done:
            raise LlmError(f"data after [DONE]: {snippet(data)}", ErrorCode.INVALID_RESPONSE)
        if stripped == DONE or stripped == DONE.encode():
            self._done = True
            return []
        return self._feed_chunk(decode_event(data, _chunk_decoder, unterminated=unterminated, what="chunk"))

    def _feed_chunk(self, chunk: _Chunk) -> list[StreamChunk]:
        if chunk.error is not None:
            raise error_from_payload(chunk.error, what="the provider reported an error mid-stream")
        out: list[StreamChunk] = []
        usage = chunk.usage if chunk.usage is not None else chunk.x_groq.usage if chunk.x_groq is not None else None
        if usage is not None:
            self._usage = usage_from_wire(usage)
        for choice in chunk.choices or ():
            if choice.index != 0:
                raise LlmError(
                    f"the provider sent choice #{choice.index}; only one choice (n=1) is supported",
                    ErrorCode.INVALID_RESPONSE,
                )
            delta = choice.delta
            if delta is not None:
                reasoning = delta.reasoning_content or delta.reasoning
                if reasoning:
                    self._text("reasoning", reasoning, out)
                if isinstance(delta.content, list):
                    for kind, text in _content_parts(delta.content):
                        if text:
                            self._text(kind, text, out)
                elif delta.content:
                    self._text("text", delta.content, out)
                for call in delta.tool_calls or ():
                    self._tool(call, out)
            if choice.finish_reason is not None:
                self._finish = finish_from_wire(choice.finish_reason)
        return out

    def close(self) -> list[StreamChunk]:
        """End of body: close blocks, emit ``usage`` then ``finish``.

        A body that ended without ``[DONE]`` and without any ``finish_reason`` was cut short:
        ``STREAM_ABORTED``. ``[DONE]`` without a ``finish_reason`` counts as ``stop``.
        """
        require_finished(self._finish is not None or self._done)
        out: list[StreamChunk] = []
        self._end_block(out, may_cut=self._finish is not None and self._finish.kind == "length")
        return out + ending(self._usage, self._finish or FinishReason(kind="stop"))

    # -- blocks --------------------------------------------------------------------------------------

    def _text(self, kind: Literal["text", "reasoning"], text: str, out: list[StreamChunk]) -> None:
        if self._block_type != kind:
            self._end_block(out)
            self._start(kind, out)
        self._pieces.append(text)
        out.append(
            TextDelta(index=self._block, text=text) if kind == "text" else ReasoningDelta(index=self._block, text=text)
        )

    def _start(self, kind: Literal["text", "reasoning", "tool-call"], out: list[StreamChunk]) -> None:
        self._block = self._next_index
        self._next_index += 1
        self._block_type = kind
        self._pieces = []
        out.append(BlockStart(index=self._block, block_type=kind))

    def _end_block(self, out: list[StreamChunk], *, may_cut: bool = False) -> None:
        """Close the open block; ending the tool-call phase flushes every buffered call in index order.

        ``may_cut``: the stream finished with ``length``, so its last tool call may be one the token limit cut."""
        if self._block_type == "text":
            out.append(BlockEnd(index=self._block, block=TextBlock(text="".join(self._pieces))))
        elif self._block_type == "reasoning":
            out.append(BlockEnd(index=self._block, block=ReasoningBlock(text="".join(self._pieces))))
        elif self._block_type == "tool-call":
            buffered = [key for key in sorted(self._calls) if self._calls[key].state == "buffered"]
            self._end_live(out, may_cut=may_cut and not buffered)
            for key in buffered:
                self._go_live(self._calls[key], out)
                self._end_live(out, may_cut=may_cut and key == buffered[-1])
        self._block_type = None

    def _tool(self, delta: _ToolCall, out: list[StreamChunk]) -> None:
        index = self._call_key(delta)
        key = self._current.get(index)
        call = self._calls.get(key) if key is not None else None
        function = delta.function
        name = function.name if function is not None else None
        arguments = (function.arguments if function is not None else None) or ""
        new_id = delta.id or None
        if call is not None and key is not None and new_id is not None and call.id not in (None, new_id):
            # A new id at an index a different call already used (ollama, litellm, dynamo send every parallel
            # call as index 0): a new call, not more of the old one.
            key = (index, key[1] + 1)
            call = None
        if call is None:
            key = key or (index, 0)
            call = self._calls[key] = _Call()
            self._current[index] = key
        else:
            # Providers may repeat id/name on later deltas; the first one counts.
            if new_id is not None and call.id is not None:
                new_id = None
            if name is not None and call.name is not None:
                name = None
        if not name:
            name = None
        if call.state == "done":
            # Trailing whitespace after complete arguments changes nothing; anything else is more of the call.
            if (arguments and not arguments.isspace()) or new_id or name:
                raise LlmError(
                    f"tool call #{index} received more data after it was complete: {arguments!r}",
                    ErrorCode.INVALID_RESPONSE,
                )
            return
        if new_id is not None:
            call.id = new_id
        if name is not None:
            call.name = name
        if call.state == "live":
            self._call_delta(call, new_id, name, arguments, out)
            return
        call.pieces.append((new_id, name, arguments))
        live = self._live
        if live is None or self._block_type != "tool-call":
            self._end_block(out)
            self._go_live(call, out)
        elif _complete_json("".join(self._pieces)):
            self._end_live(out)
            nxt = min(key for key, c in self._calls.items() if c.state == "buffered")
            self._go_live(self._calls[nxt], out)

    def _call_key(self, delta: _ToolCall) -> int:
        """The provider's ``index``; servers that omit it get one per new id (else the latest call)."""
        if delta.index is not None:
            return delta.index
        if delta.id and all(call.id != delta.id for call in self._calls.values()):
            return max(self._current, default=-1) + 1
        for key in reversed(self._calls):
            if not delta.id or self._calls[key].id == delta.id:
                return key[0]
        return 0

    def _go_live(self, call: _Call, out: list[StreamChunk]) -> None:
        self._start("tool-call", out)
        call.state = "live"
        call.block_index = self._block
        self._live = call
        pieces, call.pieces = call.pieces, []
        for piece_id, piece_name, arguments in pieces:
            self._call_delta(call, piece_id, piece_name, arguments, out)

    def _call_delta(
        self, call: _Call, call_id: str | None, name: str | None, arguments: str, out: list[StreamChunk]
    ) -> None:
        if call_id is None and name is None and not arguments:
            return
        self._pieces.append(arguments)
        out.append(
            ToolCallDelta(
                index=call.block_index,
                id=CallId(call_id) if call_id is not None else None,
                name=name,
                arguments_delta=arguments,
            )
        )

    def _end_live(self, out: list[StreamChunk], *, may_cut: bool = False) -> None:
        call = self._live
        if call is None:
            return
        arguments = "".join(self._pieces)
        if not arguments:
            # Some servers send no arguments at all for a parameterless call; "{}" keeps the block valid JSON.
            arguments = "{}"
            out.append(ToolCallDelta(index=call.block_index, arguments_delta=arguments))
        if call.name is None:
            raise LlmError(f"tool call #{call.block_index} never got a function name", ErrorCode.INVALID_RESPONSE)
        cut = not _complete_json(arguments)
        if cut and not (may_cut and unfinished_json(arguments)):  # a cut stops early; junk is no cut
            raise LlmError(
                f"tool call {call.name!r} has arguments that are not valid JSON: {snippet(arguments)}",
                ErrorCode.INVALID_RESPONSE,
            )
        # A provider that never sends an id still gets a stable one, derived from the block position.
        call_id = CallId(call.id or f"call_{call.block_index}")
        if call.id is None:
            call.id = call_id
            out.append(ToolCallDelta(index=call.block_index, id=call_id, arguments_delta=""))
        out.append(
            BlockEnd(
                index=call.block_index, block=ToolCallBlock(id=call_id, name=call.name, arguments=arguments, cut=cut)
            )
        )
        call.state = "done"
        self._live = None
        self._pieces = []


def _content_parts(parts: list[Any]) -> Iterator[tuple[Literal["text", "reasoning"], str]]:
    """Mistral's content parts in order: ``text`` parts as text, ``thinking`` parts (a string or a list of text
    parts) as reasoning. Any other part raises ``INVALID_RESPONSE`` naming it: dropping it would lose content."""
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            yield "text", part["text"]
            continue
        thinking = part.get("thinking") if kind == "thinking" else None
        pieces = [thinking] if isinstance(thinking, str) else thinking if isinstance(thinking, list) else [None]
        texts = [piece.get("text") if isinstance(piece, dict) else piece for piece in pieces]
        if not all(isinstance(text, str) for text in texts):  # an image, a reference, a malformed part
            raise LlmError(
                f"the provider sent a content part that is not text or thinking text: {snippet(repr(part))}",
                ErrorCode.INVALID_RESPONSE,
            )
        for text in texts:
            yield "reasoning", str(text)


def _complete_json(text: str) -> bool:
    try:
        _any_decoder.decode(text)
    except msgspec.DecodeError:
        return False
    return True


def decode_openai_sse(body: bytes) -> list[StreamChunk]:
    """Decode a whole recorded SSE body into StreamChunks (the vcrpy import and tests use this)."""
    return decode_body(body, OpenAIChatDecoder())


def decode_openai_completion(body: bytes | str | Mapping[str, Any]) -> list[StreamChunk]:
    """A non-streamed ``chat.completion`` (JSON bytes or the decoded object) as the chunks its stream would give.

    Each choice's ``message`` is fed to ``OpenAIChatDecoder`` as one delta (tool calls in their listed order),
    then its ``finish_reason``, then ``usage``. Raises ``LlmError(INVALID_RESPONSE)`` for a body that is not a
    ``chat.completion`` object (what is wrong, and where), and the decoder's errors.
    """
    try:
        if isinstance(body, bytes | str):
            completion = _completion_decoder.decode(body)
        else:
            completion = msgspec.convert(body, _Completion)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise LlmError(f"not a chat.completion object: {exc}", ErrorCode.INVALID_RESPONSE, cause=exc) from exc
    decoder = OpenAIChatDecoder()
    out: list[StreamChunk] = []
    for choice in completion.choices or ():
        message = choice.message or _Message()
        calls = [
            msgspec.structs.replace(call, index=position) for position, call in enumerate(message.tool_calls or ())
        ]
        delta = _Delta(
            content=message.content,
            reasoning_content=message.reasoning_content,
            reasoning=message.reasoning,
            tool_calls=calls or None,
        )
        out.extend(decoder._feed_chunk(_Chunk(choices=[_Choice(index=choice.index, delta=delta)])))
        finish = _Choice(index=choice.index, finish_reason=choice.finish_reason)
        out.extend(decoder._feed_chunk(_Chunk(choices=[finish])))
    if completion.usage is not None:
        out.extend(decoder._feed_chunk(_Chunk(choices=[], usage=completion.usage)))
    out.extend(decoder.feed_data(DONE))
    out.extend(decoder.close())
    return out
