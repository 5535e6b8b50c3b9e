"""A deterministic offline adapter that streams scripted turns: the demo's provider and the tests' workhorse."""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

import msgspec

from chunktape import _abort as abort
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import (
    BlockEnd,
    BlockStart,
    CallId,
    Finish,
    FinishKind,
    FinishReason,
    GenerateOptions,
    LlmAdapter,
    ReasoningBlock,
    ReasoningDelta,
    ReasoningOption,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
    check_reasoning,
)

__all__ = ["ScriptedAdapter", "ScriptedError", "ScriptedToolCall", "ScriptedTurn", "script_chunks"]

_WORDS = re.compile(r"\s*\S+\s*|\s+")


class ScriptedToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call the script makes; dict arguments are encoded to compact JSON."""

    name: str
    arguments: dict[str, Any] | str = {}
    id: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.arguments, str):
            try:
                msgspec.json.decode(self.arguments)
            except msgspec.DecodeError:
                raise LlmError(
                    f"ScriptedToolCall {self.name!r}: arguments must be JSON text, got {self.arguments!r}",
                    ErrorCode.INVALID_CONFIG,
                ) from None


class ScriptedError(msgspec.Struct, frozen=True, kw_only=True):
    """Make the turn fail with this ``LlmError`` after ``after_chunks`` chunks (0: before any chunk)."""

    code: str = ErrorCode.PROVIDER_HTTP_ERROR.value
    message: str = "scripted failure"
    status: int | None = None
    retry_after: float | None = None
    after_chunks: int = 0

    def __post_init__(self) -> None:
        if self.code not in ErrorCode.__members__:
            raise LlmError(
                f"ScriptedError code {self.code!r} is not an ErrorCode (valid: {', '.join(ErrorCode)})",
                ErrorCode.INVALID_CONFIG,
            )
        if self.after_chunks < 0:
            raise LlmError("ScriptedError after_chunks must be >= 0", ErrorCode.INVALID_CONFIG)

    def to_error(self) -> LlmError:
        return LlmError(self.message, self.code, status=self.status, retry_after=self.retry_after)


class ScriptedTurn(msgspec.Struct, frozen=True, kw_only=True):
    """One generation: reasoning, then text, then tool calls, then usage and finish."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[ScriptedToolCall] = []
    usage: TokenUsage | None = None
    """Defaults to a token count derived from the script (pieces streamed)."""
    finish: FinishKind | None = None
    """Defaults to ``tool-calls`` when the turn calls tools, else ``stop``."""
    error: ScriptedError | None = None


TurnSource = Sequence[ScriptedTurn] | Callable[[GenerateOptions, int], ScriptedTurn]


class ScriptedAdapter(LlmAdapter):
    """Streams one scripted turn per ``stream()`` call, paced through ``asyncio.sleep``.

    ``turns`` is a list (turn *n* serves call *n*; ``cycle=True`` starts over) or a callable
    ``(options, call_number) -> ScriptedTurn``. ``args_piece`` sets how many characters of tool-call
    arguments each delta carries, so arguments always arrive split.
    """

    def __init__(
        self,
        turns: TurnSource,
        *,
        first_chunk_s: float = 0.0,
        between_s: float = 0.0,
        args_piece: int = 7,
        cycle: bool = False,
        reasoning_options: Sequence[ReasoningOption] = (),
        name: str = "scripted",
    ) -> None:
        if first_chunk_s < 0 or between_s < 0:
            raise LlmError("first_chunk_s and between_s must be >= 0", ErrorCode.INVALID_CONFIG)
        if args_piece < 1:
            raise LlmError("args_piece must be >= 1", ErrorCode.INVALID_CONFIG)
        self._turns = turns
        self.first_chunk_s = first_chunk_s
        self.between_s = between_s
        self.args_piece = args_piece
        self.cycle = cycle
        self._reasoning_options = tuple(reasoning_options)
        self._name = name
        self.calls = 0
        """How many ``stream()`` calls were made."""

    @property
    def name(self) -> str:
        return self._name

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        return self._reasoning_options

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        self._check_options(options)
        turn = self._next_turn(options)
        signal = options.signal
        chunks = script_chunks(turn, args_piece=self.args_piece, max_tokens=options.max_tokens)
        fail_at = turn.error.after_chunks if turn.error is not None else -1
        for position, chunk in enumerate(chunks):
            if position == fail_at and turn.error is not None:
                raise turn.error.to_error()
            await abort.sleep(self.first_chunk_s if position == 0 else self.between_s, signal)
            yield chunk
        if turn.error is not None:
            raise turn.error.to_error()

    def _check_options(self, options: GenerateOptions) -> None:
        if options.extra:
            raise LlmError(
                f"ScriptedAdapter does not understand extra fields {sorted(options.extra)}",
                ErrorCode.UNSUPPORTED_OPTION,
            )
        check_reasoning(self, options)

    def _next_turn(self, options: GenerateOptions) -> ScriptedTurn:
        number = self.calls
        self.calls += 1
        if callable(self._turns):
            return self._turns(options, number)
        if not self._turns:
            raise LlmError("the script has no turns", ErrorCode.SCRIPT_EXHAUSTED)
        if number >= len(self._turns) and not self.cycle:
            raise LlmError(
                f"call #{number + 1} but the script has only {len(self._turns)} turn(s)",
                ErrorCode.SCRIPT_EXHAUSTED,
            )
        return self._turns[number % len(self._turns)]


def _pieces(text: str) -> list[str]:
    return _WORDS.findall(text)


def script_chunks(turn: ScriptedTurn, *, args_piece: int = 7, max_tokens: int | None = None) -> list[StreamChunk]:
    """The valid chunk sequence for a turn; ``max_tokens`` cuts output pieces and finishes with ``length``."""
    chunks: list[StreamChunk] = []
    budget = max_tokens if max_tokens is not None else -1
    spent = 0
    cut = False
    index = 0

    def take(pieces: list[str]) -> list[str]:
        nonlocal spent, cut
        if budget < 0:
            spent += len(pieces)
            return pieces
        room = max(budget - spent, 0)
        if len(pieces) > room:
            cut = True
        kept = pieces[:room]
        spent += len(kept)
        return kept

    for kind, text in (("reasoning", turn.reasoning), ("text", turn.text)):
        pieces = take(_pieces(text)) if text else []
        if not pieces:
            continue
        chunks.append(BlockStart(index=index, block_type="reasoning" if kind == "reasoning" else "text"))
        if kind == "reasoning":
            chunks.extend(ReasoningDelta(index=index, text=piece) for piece in pieces)
            chunks.append(BlockEnd(index=index, block=ReasoningBlock(text="".join(pieces))))
        else:
            chunks.extend(TextDelta(index=index, text=piece) for piece in pieces)
            chunks.append(BlockEnd(index=index, block=TextBlock(text="".join(pieces))))
        index += 1
    for number, call in enumerate(turn.tool_calls if not cut else ()):
        arguments = call.arguments if isinstance(call.arguments, str) else msgspec.json.encode(call.arguments).decode()
        call_id = CallId(call.id or f"call_{number}_{call.name}")
        pieces = [arguments[i : i + args_piece] for i in range(0, len(arguments), args_piece)] or [""]
        chunks.append(BlockStart(index=index, block_type="tool-call"))
        chunks.append(ToolCallDelta(index=index, id=call_id, name=call.name, arguments_delta=pieces[0]))
        chunks.extend(ToolCallDelta(index=index, arguments_delta=piece) for piece in pieces[1:])
        chunks.append(BlockEnd(index=index, block=ToolCallBlock(id=call_id, name=call.name, arguments=arguments)))
        index += 1
        spent += len(pieces)
    usage = turn.usage or TokenUsage(input_tokens=10 * (1 + len(turn.tool_calls)), output_tokens=spent)
    chunks.append(UsageChunk(usage=usage))
    if cut:
        finish: FinishKind = "length"
    else:
        finish = turn.finish or ("tool-calls" if turn.tool_calls else "stop")
    chunks.append(Finish(reason=FinishReason(kind=finish)))
    return chunks
