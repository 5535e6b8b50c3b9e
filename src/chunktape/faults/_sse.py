"""An OpenAI chat-completions SSE body as the fault transforms see it: frames, and how faults rewrite them.

``FaultTransport`` and ``ReplayTransport`` apply the fault catalogue (``chunktape.faults._transforms``) to an
HTTP body through this codec: ``parse_frames`` cuts the body into ``Frame`` items (one SSE item each, with what
it carries), ``SseCodec`` answers the transforms' questions about them, and ``refusal`` names the ``Corrupt``
kinds that have no form in a chat-chunk stream (``chunktape.http._fault_transport`` explains each fault's form). A
protocol with another event stream (Anthropic Messages, OpenAI Responses) gets a codec of its own beside it.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._httpx import AnyRequest, read_error
from chunktape._protocol import BlockType, aclose_stream
from chunktape.faults import Corrupt, fault_id
from chunktape.faults._plan import ActiveFault, FaultPlan
from chunktape.wire._openai_chat import DONE, MALFORMED_EVENT, data_event, decode_chat_chunk
from chunktape.wire._sse import SseComment, SseItem, SseParser, write_sse

__all__ = ["Frame", "SseCodec", "check_faults", "faulted", "parse_frames", "refusal"]

_MALFORMED = (
    MALFORMED_EVENT,
    b"data: this is not JSON\n\n",
    b'data: {"choices": \xff\xfe[]}\n\n',
)
_ARGUMENT_JUNK = (",", "}", '"', "{")
_json = msgspec.json.Decoder()
_REFUSED: Mapping[str, str] = {
    "unpaired-block": "the chat-chunk stream has no block starts or ends",
    "bad-index": "the chat-chunk stream has no block indexes",
    "interleaved": "parallel tool calls may interleave by index on the wire, and clients reorder them",
    "finish-not-last": "clients hold the finish reason until the body ends",
    "usage-after-finish": "usage after the finish is how OpenAI itself streams usage",
    "duplicate-finish": "clients hold the finish reason until the body ends",
}
"""Why each ``Corrupt`` kind without a wire form is refused (``chunktape.http._fault_transport`` explains the rest)."""


def refusal(fault: Corrupt) -> LlmError | None:
    """The ``INVALID_CONFIG`` error for a ``Corrupt`` kind with no form in an HTTP body, or None."""
    reason = _REFUSED.get(fault.kind)
    if reason is None:
        return None
    return LlmError(
        f"FaultTransport cannot apply {fault_id(fault)} to an HTTP body: {reason}; the Corrupt kinds it applies "
        "are malformed-data and bad-arguments-json (the others apply to chunk streams: ReplayAdapter, the "
        "replay server)",
        ErrorCode.INVALID_CONFIG,
    )


def check_faults(plan: FaultPlan) -> None:
    """Raise ``refusal``'s error for the first fault of ``plan`` that has no form in an HTTP body."""
    for fault in plan.stream_faults():
        refused = refusal(fault) if isinstance(fault, Corrupt) else None
        if refused is not None:
            raise refused


class Frame:
    """One SSE item as bytes, with what a fault needs to know about it."""

    __slots__ = ("data", "ending", "is_data", "kinds", "tools")

    def __init__(
        self,
        data: bytes,
        *,
        is_data: bool = False,
        ending: bool = False,
        kinds: frozenset[BlockType] = frozenset(),
        tools: tuple[int, ...] = (),
    ) -> None:
        self.data = data
        self.is_data = is_data
        self.ending = ending
        """True for ``[DONE]`` and for events carrying a finish reason or usage: the end of the answer."""
        self.kinds = kinds
        self.tools = tools
        """The provider indexes of the tool calls this event carries pieces of."""

    @property
    def counts(self) -> bool:
        """Whether this is a "chunk" for ``after_chunks``: a data event with content, or one ending the answer."""
        return self.is_data and (self.ending or bool(self.kinds))


_EVENT_KINDS: Mapping[str, BlockType] = {
    "text_delta": "text",
    "citations_delta": "text",
    "thinking_delta": "reasoning",
    "signature_delta": "reasoning",
    "input_json_delta": "tool-call",
    "response.output_text.delta": "text",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.function_call_arguments.delta": "tool-call",
}
"""What an Anthropic delta type or a Responses event carries."""
_ENDINGS = frozenset({"message_delta", "message_stop", "response.completed", "response.incomplete", "response.failed"})


def _event_frame(data: bytes, text: str) -> Frame:
    """An Anthropic Messages or OpenAI Responses event (each names its ``type``) as a frame."""
    try:
        event = _json.decode(text)
    except msgspec.DecodeError:
        return Frame(data, is_data=True)
    kind = event.get("type") if isinstance(event, dict) else None
    if kind in _ENDINGS:
        return Frame(data, is_data=True, ending=True)
    if kind == "content_block_delta":
        delta = event.get("delta")
        kind = delta.get("type") if isinstance(delta, dict) else None
    carried = _EVENT_KINDS.get(kind) if isinstance(kind, str) else None
    if carried is None:
        return Frame(data, is_data=True)
    where = event.get("index", event.get("output_index", 0))
    tools = (where,) if carried == "tool-call" and isinstance(where, int) else ()
    return Frame(data, is_data=True, kinds=frozenset({carried}), tools=tools)


def _frame(item: SseItem, events: bool = False) -> Frame:
    data = write_sse([item])
    if isinstance(item, SseComment) or item.data is None or not item.data.strip():
        return Frame(data)
    text = item.data.strip()
    if events:
        return _event_frame(data, text)
    if text == DONE:
        return Frame(data, is_data=True, ending=True)
    try:
        chunk = decode_chat_chunk(text)
    except msgspec.DecodeError:
        return Frame(data, is_data=True)
    kinds: set[BlockType] = set()
    tools: list[int] = []
    ending = chunk.usage is not None
    for choice in chunk.choices or ():
        delta = choice.delta
        if delta is not None:
            if delta.content:
                kinds.add("text")
            if delta.reasoning_content or delta.reasoning:
                kinds.add("reasoning")
            if delta.tool_calls:
                kinds.add("tool-call")
                tools.extend(call.index or 0 for call in delta.tool_calls)
        if choice.finish_reason is not None:
            ending = True
    return Frame(data, is_data=True, ending=ending, kinds=frozenset(kinds), tools=tuple(tools))


def _tool_call_frame(index: int, arguments: str, *, name: str | None = None) -> Frame:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if name is not None:
        call.update(id=f"call_{name}", type="function", function={"name": name, "arguments": arguments})
    data = data_event({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]})
    return Frame(data, is_data=True, kinds=frozenset({"tool-call"}), tools=(index,))


class _BadArguments:
    """``bad-arguments-json`` on the wire: the first tool call's arguments stop being JSON."""

    def __init__(self, fault: Corrupt) -> None:
        self.junk = random.Random(fault.seed).choice(_ARGUMENT_JUNK)
        self.call: int | None = None
        self.done = False

    def _broken(self) -> Frame:
        self.done = True
        if self.call is not None:
            return _tool_call_frame(self.call, self.junk)
        return _tool_call_frame(0, '{"broken":}', name="corrupt")

    def feed(self, frame: Frame) -> list[Frame]:
        if self.done:
            return [frame]
        if frame.tools:
            if self.call is None:
                self.call = frame.tools[0]
            if self.call in frame.tools:
                return [frame]
        if (self.call is not None and frame.is_data) or frame.ending:
            return [self._broken(), frame]  # the first call's pieces are over (or there was none)
        return [frame]

    def end(self) -> list[Frame]:
        return [] if self.done else [self._broken()]


class SseCodec:
    """The transforms' view of an SSE body; a broken connection is ``request``'s library's ``ReadError``, an error
    the provider reports in-band is the event ``report(error)`` writes in the body's protocol."""

    can_cut = True
    bytes_of = "of the body"

    def __init__(self, request: AnyRequest, report: Callable[[LlmError], bytes]) -> None:
        self.request = request
        self.report = report

    def counts(self, item: Frame) -> bool:
        return item.counts

    def paced(self, item: Frame) -> bool:
        return item.is_data

    def finishes(self, item: Frame) -> bool:
        return item.ending

    def tail(self, item: Frame) -> bool:
        return item.ending

    def size(self, item: Frame) -> int:
        return len(item.data)

    def cut(self, item: Frame, size: int | None) -> Frame:
        return Frame(item.data[: max(len(item.data) // 2, 1) if size is None else size])

    def carries(self, item: Frame, kind: BlockType) -> bool:
        return kind in item.kinds

    def opens(self, item: Frame) -> BlockType | None:
        return None  # blocks are implicit in the chat-chunk stream

    def closes(self, item: Frame) -> bool:
        return False

    def aborted(self, message: str) -> Exception:
        return read_error(self.request, f"connection reset by peer {message}")

    def malformed(self, variant: int, label: str) -> Frame:
        return Frame(_MALFORMED[variant], is_data=True)

    def corrupter(self, fault: Corrupt, label: str) -> _BadArguments:
        refused = refusal(fault)
        if refused is not None:
            raise refused
        return _BadArguments(fault)

    def reported(self, error: LlmError) -> Frame:
        return Frame(self.report(error), is_data=True, ending=True)


async def parse_frames(source: AsyncIterator[bytes], *, events: bool = False) -> AsyncIterator[Frame]:
    """``source``'s SSE items as frames, however its pieces cut them; closes ``source`` when closed. ``events``:
    the body is an Anthropic Messages or OpenAI Responses event stream (each event names its ``type``)."""
    parser = SseParser()
    try:
        async for piece in source:
            for item in parser.feed(piece):
                yield _frame(item, events)
        for item in parser.close():
            yield _frame(item, events)
    finally:
        await aclose_stream(source)


def faulted(
    source: AsyncIterator[bytes], active: ActiveFault, request: AnyRequest, report: Callable[[LlmError], bytes]
) -> AsyncIterator[Frame]:
    """The frames of ``source`` with ``active``'s fault applied (no abort signal: httpx has none); a request to
    ``.../messages`` or ``.../responses`` has an event stream of that protocol, whose in-band error event
    ``report`` writes."""
    events = request.url.path.endswith(("/messages", "/responses"))
    return active.apply(parse_frames(source, events=events), SseCodec(request, report), None)
