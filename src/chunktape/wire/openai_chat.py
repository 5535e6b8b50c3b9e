"""The OpenAI-compatible ``chat.completion.chunk`` format in both directions, written once.

Decoding (provider -> us): ``OpenAIChatDecoder`` turns chunk JSON into a *valid* StreamChunk sequence:

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

Encoding (us -> wire): ``chunks_to_openai_dicts`` / ``chunks_to_openai_events`` render a chunk stream as an
OpenAI-style stream (role chunk, one chunk per delta, finish chunk, usage-only chunk, ``[DONE]``) that the
decoder turns back into ``==`` chunks. What the format cannot carry: a finish ``detail`` except on ``error``
(where it becomes the ``finish_reason``), two adjacent blocks of the same text/reasoning type (they merge),
and blocks without deltas.

``options_to_openai_request`` builds the request body from ``GenerateOptions``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

import msgspec

from chunktape.errors import ErrorCode, LlmError
from chunktape.protocol import (
    BlockEnd,
    BlockStart,
    CallId,
    Finish,
    FinishKind,
    FinishReason,
    GenerateOptions,
    Message,
    ReasoningBlock,
    ReasoningDelta,
    Role,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    ToolSpec,
    UsageChunk,
)
from chunktape.wire.http_errors import error_from_payload
from chunktape.wire.sse import SseComment, SseItem, SseParser

__all__ = [
    "ChatChunk",
    "DEEPSEEK_REASONING",
    "DONE",
    "DONE_EVENT",
    "OPENAI_REASONING",
    "OpenAIChatDecoder",
    "OpenAIChatEncoder",
    "REASONING_FIELDS",
    "chunks_to_openai_dicts",
    "chunks_to_openai_events",
    "data_event",
    "decode_chat_chunk",
    "decode_openai_completion",
    "decode_openai_sse",
    "error_from_payload",
    "not_an_event_stream",
    "options_from_openai_request",
    "options_to_openai_request",
]

DONE = "[DONE]"

DEEPSEEK_REASONING: Mapping[str, Mapping[str, Any]] = {
    "thinking": {"thinking": {"type": "enabled"}},
    "no-thinking": {"thinking": {"type": "disabled"}},
}
"""DeepSeek's thinking switch, as request fields per effort id."""

OPENAI_REASONING: Mapping[str, Mapping[str, Any]] = {
    effort: {"reasoning_effort": effort} for effort in ("low", "medium", "high")
}
"""The ``reasoning_effort`` most OpenAI-compatible providers accept."""

REASONING_FIELDS: Mapping[str, Mapping[str, Any]] = {**DEEPSEEK_REASONING, **OPENAI_REASONING}
"""Request fields per reasoning effort, in both vocabularies ``OpenAICompatAdapter`` speaks: decoding a request
(``options_from_openai_request(body, reasoning=REASONING_FIELDS)``) maps them back to ``reasoning=<effort>``."""

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


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _CompletionDetails(msgspec.Struct):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_cache_hit_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _Groq(msgspec.Struct):
    usage: _Usage | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
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
    usage: _Usage | None = None


_chunk_decoder = msgspec.json.Decoder(_Chunk)

ChatChunk = _Chunk
"""One ``chat.completion.chunk`` JSON object, typed and lenient, for code that inspects events as they pass."""


def decode_chat_chunk(data: str | bytes) -> ChatChunk:
    """One ``data:`` payload as a ``ChatChunk``; raises ``msgspec.DecodeError`` when it is not one."""
    return _chunk_decoder.decode(data)


_completion_decoder = msgspec.json.Decoder(_Completion)
_any_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()

_FINISH_FROM_WIRE: dict[str, FinishKind] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "content_filter": "content-filter",
    "error": "error",
    "cancelled": "cancelled",
}
_FINISH_TO_WIRE: dict[FinishKind, str] = {
    "stop": "stop",
    "length": "length",
    "tool-calls": "tool_calls",
    "content-filter": "content_filter",
    "error": "error",
    "cancelled": "cancelled",
}


def finish_from_wire(reason: str) -> FinishReason:
    """Map a ``finish_reason``; unknown ones (``insufficient_system_resource``) are errors with the reason."""
    kind = _FINISH_FROM_WIRE.get(reason)
    if kind is None:
        return FinishReason(kind="error", detail=reason)
    return FinishReason(kind=kind)


def usage_from_wire(usage: _Usage) -> TokenUsage:
    cached = usage.prompt_cache_hit_tokens
    if cached is None and usage.prompt_tokens_details is not None:
        cached = usage.prompt_tokens_details.cached_tokens
    details = usage.completion_tokens_details
    return TokenUsage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cached_input_tokens=cached,
        reasoning_tokens=details.reasoning_tokens if details is not None else None,
    )


def not_an_event_stream(body: bytes, content_type: str | None, *, who: str = "the provider") -> LlmError:
    """A 2xx body that held no SSE at all (an HTML page, a proxy's login form): ``INVALID_RESPONSE`` with a snippet.

    A JSON error object (whatever the content type) becomes ``error_from_payload``'s error instead.
    """
    try:
        payload: Any = _any_decoder.decode(body)
    except msgspec.DecodeError:
        payload = None
    if isinstance(payload, dict) and payload.get("error") is not None:
        return error_from_payload(payload, what=f"{who} answered with an error")
    kind = content_type or "no content-type"
    return LlmError(
        f"{who} answered with something that is not an event stream ({kind}): {_snippet(body, 200)}",
        ErrorCode.INVALID_RESPONSE,
        hint="check the base URL (a proxy or login page?) and that the endpoint streams chat completions",
    )


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
            raise LlmError(f"data after [DONE]: {_snippet(data)}", ErrorCode.INVALID_RESPONSE)
        if stripped == DONE or stripped == DONE.encode():
            self._done = True
            return []
        try:
            chunk = _chunk_decoder.decode(data)
        except msgspec.DecodeError as exc:
            if unterminated:
                raise LlmError(
                    f"the stream ended in the middle of an event: {_snippet(data)}", ErrorCode.STREAM_ABORTED, cause=exc
                ) from exc
            raise LlmError(
                f"unparseable chunk from the provider ({exc}): {_snippet(data)}", ErrorCode.INVALID_RESPONSE, cause=exc
            ) from exc
        return self._feed_chunk(chunk)

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
        if self._finish is None and not self._done:
            raise LlmError("the stream ended before the provider finished it", ErrorCode.STREAM_ABORTED)
        out: list[StreamChunk] = []
        self._end_block(out)
        if self._usage is not None:
            out.append(UsageChunk(usage=self._usage))
        out.append(Finish(reason=self._finish or FinishReason(kind="stop")))
        return out

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

    def _end_block(self, out: list[StreamChunk]) -> None:
        """Close the open block; ending the tool-call phase flushes every buffered call in index order."""
        if self._block_type == "text":
            out.append(BlockEnd(index=self._block, block=TextBlock(text="".join(self._pieces))))
        elif self._block_type == "reasoning":
            out.append(BlockEnd(index=self._block, block=ReasoningBlock(text="".join(self._pieces))))
        elif self._block_type == "tool-call":
            self._end_live(out)
            for key in sorted(self._calls):
                call = self._calls[key]
                if call.state == "buffered":
                    self._go_live(call, out)
                    self._end_live(out)
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

    def _end_live(self, out: list[StreamChunk]) -> None:
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
        if not _complete_json(arguments):
            raise LlmError(
                f"tool call {call.name!r} has arguments that are not valid JSON: {_snippet(arguments)}",
                ErrorCode.INVALID_RESPONSE,
            )
        # A provider that never sends an id still gets a stable one, derived from the block position.
        call_id = CallId(call.id or f"call_{call.block_index}")
        if call.id is None:
            call.id = call_id
            out.append(ToolCallDelta(index=call.block_index, id=call_id, arguments_delta=""))
        out.append(
            BlockEnd(index=call.block_index, block=ToolCallBlock(id=call_id, name=call.name, arguments=arguments))
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
                f"the provider sent a content part that is not text or thinking text: {_snippet(repr(part))}",
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


def _snippet(data: str | bytes, limit: int = 120) -> str:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def decode_openai_sse(body: bytes) -> list[StreamChunk]:
    """Decode a whole recorded SSE body into StreamChunks (the vcrpy import and tests use this)."""
    parser = SseParser()
    decoder = OpenAIChatDecoder()
    out: list[StreamChunk] = []
    for item in parser.feed(body):
        out.extend(decoder.feed_item(item))
    for item in parser.close():
        out.extend(decoder.feed_item(item, unterminated=item is parser.unterminated))
    out.extend(decoder.close())
    return out


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


# -- encoding ---------------------------------------------------------------------------------------


class OpenAIChatEncoder:
    """Incremental form of ``chunks_to_openai_dicts``: ``start()``, then ``feed(chunk)`` per chunk, then ``close()``.

    For servers that render a stream as it is replayed; each call returns the chunk objects ready to send.
    """

    __slots__ = ("_base", "_tool_numbers", "_usage", "finished")

    def __init__(self, *, model: str, created: int = 0, id: str = "chatcmpl-chunktape") -> None:
        self._base: dict[str, Any] = {"id": id, "object": "chat.completion.chunk", "created": created, "model": model}
        self._tool_numbers: dict[int, int] = {}
        self._usage: TokenUsage | None = None
        self.finished = False
        """True once a ``Finish`` was fed (the stream may then end with ``[DONE]``)."""

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**self._base, "choices": [choice]}

    def start(self) -> dict[str, Any]:
        """The role chunk every OpenAI stream opens with."""
        return self._chunk({"role": "assistant", "content": ""})

    def feed(self, item: StreamChunk) -> list[dict[str, Any]]:
        """The chunk objects for one StreamChunk (none for block starts/ends and usage, which waits for the end)."""
        match item:
            case TextDelta():
                return [self._chunk({"content": item.text})]
            case ReasoningDelta():
                return [self._chunk({"reasoning_content": item.text})]
            case ToolCallDelta():
                number = self._tool_numbers.setdefault(item.index, len(self._tool_numbers))
                call: dict[str, Any] = {"index": number}
                function: dict[str, Any] = {}
                if item.id is not None:
                    call["id"] = item.id
                    call["type"] = "function"
                if item.name is not None:
                    function["name"] = item.name
                function["arguments"] = item.arguments_delta
                call["function"] = function
                return [self._chunk({"tool_calls": [call]})]
            case UsageChunk():
                self._usage = item.usage
                return []
            case Finish():
                self.finished = True
                return [self._chunk({}, finish_to_wire(item.reason))]
            case BlockStart() | BlockEnd():
                return []

    def close(self) -> list[dict[str, Any]]:
        """The usage-only chunk (``choices: []``), when the stream had usage."""
        if self._usage is None:
            return []
        return [{**self._base, "choices": [], "usage": usage_to_wire(self._usage)}]


def chunks_to_openai_dicts(
    chunks: Iterable[StreamChunk], *, model: str, created: int = 0, id: str = "chatcmpl-chunktape"
) -> Iterator[dict[str, Any]]:
    """Render StreamChunks as ``chat.completion.chunk`` objects that ``OpenAIChatDecoder`` maps back to ``==``.

    Layout: a role chunk, one chunk per delta, a chunk with ``finish_reason``, then a usage-only chunk with
    ``choices: []`` (OpenAI's ``include_usage`` shape). Block starts and ends are implicit in the format.
    """
    encoder = OpenAIChatEncoder(model=model, created=created, id=id)
    yield encoder.start()
    for item in chunks:
        yield from encoder.feed(item)
    yield from encoder.close()


DONE_EVENT = b"data: [DONE]\n\n"


def data_event(obj: Any) -> bytes:
    """One chunk object as an SSE ``data:`` event (compact JSON holds no newline, so one line is enough)."""
    return b"data: " + _encoder.encode(obj) + b"\n\n"


def chunks_to_openai_events(
    chunks: Iterable[StreamChunk], *, model: str, created: int = 0, id: str = "chatcmpl-chunktape"
) -> Iterator[bytes]:
    """The SSE bytes of ``chunks_to_openai_dicts``, one ``data:`` event each, then ``data: [DONE]``.

    ``[DONE]`` is written only when the stream has a ``finish`` (a cut-short recording ends without it).
    """
    encoder = OpenAIChatEncoder(model=model, created=created, id=id)
    yield data_event(encoder.start())
    for item in chunks:
        for obj in encoder.feed(item):
            yield data_event(obj)
    for obj in encoder.close():
        yield data_event(obj)
    if encoder.finished:
        yield DONE_EVENT


def finish_to_wire(reason: FinishReason) -> str:
    if reason.kind == "error" and reason.detail and reason.detail not in _FINISH_FROM_WIRE:
        return reason.detail
    return _FINISH_TO_WIRE[reason.kind]


def usage_to_wire(usage: TokenUsage) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }
    if usage.cached_input_tokens is not None:
        wire["prompt_tokens_details"] = {"cached_tokens": usage.cached_input_tokens}
        wire["prompt_cache_hit_tokens"] = usage.cached_input_tokens
    if usage.reasoning_tokens is not None:
        wire["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return wire


# -- requests ---------------------------------------------------------------------------------------


def message_to_openai(message: Message) -> dict[str, Any]:
    """One message; ``reasoning_content`` goes back only on assistant tool-call turns (DeepSeek's rule)."""
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name is not None:
        wire["name"] = message.name
    if message.role == "tool":
        if message.tool_call_id is None:
            raise LlmError("a tool message needs tool_call_id", ErrorCode.UNSUPPORTED_OPTION)
        wire["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        if message.role != "assistant":
            raise LlmError(f"tool_calls on a {message.role} message", ErrorCode.UNSUPPORTED_OPTION)
        wire["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in message.tool_calls
        ]
        if message.reasoning_content is not None:
            wire["reasoning_content"] = message.reasoning_content
    return wire


def options_to_openai_request(
    options: GenerateOptions, *, model: str | None = None, extra_fields: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The streaming request body: messages, tools, limits, ``stream_options.include_usage``, then ``extra``.

    ``extra_fields`` (e.g. what a reasoning effort maps to) are merged before ``options.extra``.
    """
    body: dict[str, Any] = {
        "model": model or options.model,
        "messages": [message_to_openai(message) for message in options.messages],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if options.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
            }
            for tool in options.tools
        ]
    if options.max_tokens is not None:
        body["max_tokens"] = options.max_tokens
    if options.temperature is not None:
        body["temperature"] = options.temperature
    body.update(extra_fields or {})
    body.update(options.extra)
    return body


_TRANSPORT_FIELDS = ("stream", "stream_options")
"""Request fields that say how to deliver the answer, not what to generate: never part of ``extra``."""
_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def _bad_request(message: str) -> LlmError:
    return LlmError(f"not an OpenAI chat-completions request: {message}", ErrorCode.UNSUPPORTED_OPTION)


def _typed(value: Any, kind: Any, field: str) -> Any:
    """``value`` as ``kind`` (strictly: ``"5"`` is not an int), or ``_bad_request`` naming ``field``."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        raise _bad_request(f"`{field}`: {exc} (got {value!r:.80})") from None


def _content_text(content: Any, where: str) -> str | None:
    """``content`` as a string: a list of ``{"type": "text"}`` parts is joined; other parts are refused."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise _bad_request(f"{where}: content part {kind!r} cannot be represented (only text parts)")
        return "".join(texts)
    raise _bad_request(f"{where}: content must be a string, a list of text parts or null")


def message_from_openai(wire: Any, where: str = "messages[0]") -> Message:
    """The inverse of ``message_to_openai``."""
    if not isinstance(wire, dict):
        raise _bad_request(f"{where} must be an object")
    role = _ROLES.get(wire.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise _bad_request(f"{where}: unknown role {wire.get('role')!r} (valid: {', '.join(_ROLES)})")
    calls: list[ToolCallBlock] = []
    listed = wire.get("tool_calls")
    if listed is not None and not isinstance(listed, list):
        raise _bad_request(f"{where}.tool_calls must be a list, got {type(listed).__name__}")
    for position, call in enumerate(listed or ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _bad_request(f"{where}.tool_calls[{position}] needs function.name")
        arguments = function.get("arguments")
        calls.append(
            ToolCallBlock(
                id=CallId(str(call.get("id") or f"call_{position}")),
                name=function["name"],
                arguments=arguments if isinstance(arguments, str) else _encoder.encode(arguments or {}).decode(),
            )
        )
    return Message(
        role=role,
        content=_content_text(wire.get("content"), where),
        tool_calls=calls,
        tool_call_id=_typed(wire.get("tool_call_id"), str | None, f"{where}.tool_call_id"),
        name=_typed(wire.get("name"), str | None, f"{where}.name"),
        reasoning_content=_typed(wire.get("reasoning_content"), str | None, f"{where}.reasoning_content")
        if calls
        else None,
    )


def options_from_openai_request(
    body: Any, *, reasoning: Mapping[str, Mapping[str, Any]] | None = None
) -> GenerateOptions:
    """The inverse of ``options_to_openai_request``: a chat-completions request body as ``GenerateOptions``.

    ``stream`` and ``stream_options`` are dropped (they say how to deliver, not what to generate). When the
    body carries exactly the fields one of ``reasoning``'s efforts maps to (e.g. DeepSeek's
    ``{"thinking": {"type": "enabled"}}``), they become ``reasoning=<effort id>``; every other field goes to
    ``extra``. Raises ``LlmError(UNSUPPORTED_OPTION)`` for a body this format cannot represent.
    """
    if not isinstance(body, dict):
        raise _bad_request(f"the body must be a JSON object, got {type(body).__name__}")
    rest = {key: value for key, value in body.items() if key not in _TRANSPORT_FIELDS}
    model = rest.pop("model", None)
    if not isinstance(model, str):
        raise _bad_request("`model` must be a string")
    messages = rest.pop("messages", None)
    if not isinstance(messages, list):
        raise _bad_request("`messages` must be a list")
    tools: list[ToolSpec] = []
    listed = rest.pop("tools", None)
    if listed is not None and not isinstance(listed, list):
        raise _bad_request(f"`tools` must be a list of function tools, got {type(listed).__name__}")
    for position, tool in enumerate(listed or ()):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _bad_request(f"tools[{position}] must be a function tool with a name")
        tools.append(
            ToolSpec(
                name=function["name"],
                description=_typed(function.get("description") or "", str, f"tools[{position}].description"),
                parameters=_typed(function.get("parameters") or {}, dict[str, Any], f"tools[{position}].parameters"),
            )
        )
    max_tokens = _typed(rest.pop("max_tokens", None), int | None, "max_tokens")
    if max_tokens is None and "max_completion_tokens" in rest:
        max_tokens = _typed(rest.pop("max_completion_tokens"), int | None, "max_completion_tokens")
    temperature = _typed(rest.pop("temperature", None), float | None, "temperature")
    effort: str | None = None
    for name, fields in (reasoning or {}).items():
        if fields and all(key in rest and rest[key] == value for key, value in fields.items()):
            effort = name
            for key in fields:
                del rest[key]
            break
    try:
        return GenerateOptions(
            model=model,
            messages=[message_from_openai(message, f"messages[{i}]") for i, message in enumerate(messages)],
            tools=tools,
            max_tokens=max_tokens,
            temperature=temperature,
            reasoning=effort,
            extra=rest,
        )
    except (TypeError, ValueError, msgspec.ValidationError) as exc:
        raise _bad_request(str(exc)) from exc
