"""A conversation with a live model, turn by turn, as a person drives it: what ``chunktape record --chat`` runs.

Unlike ``run_agent`` it makes each call once (a recording keeps what the provider did, retries are the person's),
and hands every chunk to its caller as it arrives. With a ``ToolRunner`` every tool-call turn is answered before
anything else is sent (providers reject a user message after unanswered tool calls); a turn that failed can be
rewound, so the person can try again while the failure stays recorded.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from chunktape._errors import LlmError
from chunktape._protocol import (
    FinishReason,
    GenerateOptions,
    LlmAdapter,
    Message,
    Reply,
    ReplyBuilder,
    StreamChunk,
)
from chunktape.harness._events import ToolCallEvent, ToolResultEvent
from chunktape.harness._tools import ToolRunner, tool_error

__all__ = ["MAX_TOOL_ROUNDS", "Conversation"]

MAX_TOOL_ROUNDS = 25
"""Tool-call turns answered in a row before the person is asked again (a model that never stops calling tools)."""


class Conversation:
    """``options`` (its messages: the conversation so far) sent to ``adapter`` one turn at a time.

    ``on_chunk`` sees each chunk of a reply as it arrives; ``on_tool_result`` each result ``tools`` gave.
    """

    def __init__(
        self,
        adapter: LlmAdapter,
        options: GenerateOptions,
        *,
        tools: ToolRunner | None = None,
        on_chunk: Callable[[StreamChunk], None] = lambda chunk: None,
        on_tool_result: Callable[[ToolResultEvent], None] = lambda result: None,
    ) -> None:
        self.adapter = adapter
        self.options = options
        self.tools = tools
        self.on_chunk = on_chunk
        self.on_tool_result = on_tool_result

    @property
    def messages(self) -> list[Message]:
        return self.options.messages

    def add(self, message: Message) -> None:
        self.options = msgspec.structs.replace(self.options, messages=[*self.options.messages, message])

    def mark(self) -> int:
        """Where the conversation is now, for ``rewind``."""
        return len(self.options.messages)

    def rewind(self, mark: int) -> None:
        """Back to the conversation as it was at ``mark``."""
        self.options = msgspec.structs.replace(self.options, messages=self.options.messages[:mark])

    async def turn(self) -> LlmError | None:
        """One reply to the conversation so far; it joins the conversation. A failure is returned, not raised."""
        reply = ReplyBuilder()
        try:
            async for chunk in self.adapter.stream(self.options):
                reply.feed(chunk)
                self.on_chunk(chunk)
        except LlmError as error:
            return error
        calls = [call for call in reply.tool_calls if not call.cut]  # a cut call cannot be answered
        if not calls:  # reasoning goes back only on tool-call turns (DeepSeek's rule; Anthropic ignores it elsewhere)
            self.add(Message(role="assistant", content=reply.text or None))
            return None
        whole = Reply(
            text=reply.text,
            reasoning=reply.reasoning,
            tool_calls=calls,
            finish=reply.finish or FinishReason(kind="tool-calls"),
            blocks=reply.blocks,
            reasoning_items=reply.reasoning_items,
        )
        self.add(whole.message())
        return None

    async def agent_turn(self) -> LlmError | None:
        """A model turn, then (with ``tools``) its tool results and the next model turn, until one makes no tool
        calls or ``MAX_TOOL_ROUNDS`` passed: every tool call is answered before the person is asked again."""
        for _ in range(MAX_TOOL_ROUNDS):
            failure = await self.turn()
            last = self.options.messages[-1]
            if failure is not None or self.tools is None or last.role != "assistant" or not last.tool_calls:
                return failure
            for result in await self._answer(last):
                self.on_tool_result(result)
                self.add(Message(role="tool", tool_call_id=result.tool_call_id, content=result.content))
        return None

    async def _answer(self, reply: Message) -> list[ToolResultEvent]:
        assert self.tools is not None
        calls: list[ToolCallEvent] = []
        bad: dict[int, ToolResultEvent] = {}
        for index, block in enumerate(reply.tool_calls):
            try:
                calls.append(ToolCallEvent.from_block(block, index))
            except LlmError as error:  # the model's arguments are not a JSON object: tell it so
                call = ToolCallEvent(
                    id=block.id, name=block.name, arguments={}, raw_arguments=block.arguments, index=index
                )
                bad[index] = tool_error(call, error.message)
        answered = iter(await self.tools.run_turn(calls))
        results = [bad[index] if index in bad else next(answered) for index in range(len(reply.tool_calls))]
        return [result for result in results if result is not None]
