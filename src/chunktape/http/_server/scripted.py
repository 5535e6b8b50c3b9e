"""A scripted provider: the OpenAI-compatible provider a user writes for their own conversation (``serve --script``).

A script file (TOML, or JSON by its suffix) lists the turns the provider answers, like aimock's fixtures::

    pace = { first_chunk_s = 0.2, between_s = 0.02 }    # optional; default: no delay

    [[turns]]
    when = "weather"                                   # optional: a regex the request's last message must contain
    text = "Let me check."
    tool_calls = [{ name = "get_weather", arguments = { city = "Paris" } }]
    usage = { input_tokens = 12, output_tokens = 9 }   # optional; default: counted from the script
    finish = "tool-calls"                              # optional: stop, tool-calls, length, content-filter, ...

    [[turns]]
    error = { status = 429, retry_after = 1, message = "slow down" }   # an HTTP error before any chunk

    [[turns]]
    text = "It is sunny in Paris."
    error = { code = "STREAM_ABORTED", after_chunks = 3 }   # the connection breaks mid-stream (with a status and
                                                            # PROVIDER_HTTP_ERROR: an in-band error event)

Each request gets the first unused turn whose ``when`` its last message matches (a turn without ``when`` matches
any), in the order listed; ``repeat = true`` lets a turn answer again and again. A turn is used up once it was
answered to its end (a scripted error counts as its end); a call broken by an injected fault (``--fault``: every
fault of the catalogue applies on top) leaves its turn for the retry, as a replay does. No turn left: a
``CASSETTE_EXHAUSTED`` miss (418), like a replay out of interactions.

With ``record`` the server also records what it answered, with the client's real requests, into a cassette saved
when it stops: the user's own agent is recorded against the provider they scripted in one step, and its tests
replay that cassette.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import msgspec

from chunktape import _abort as abort
from chunktape._cassettes.model import RecordedRequest
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import FinishKind, GenerateOptions, LlmAdapter, StreamChunk, TokenUsage, aclose_stream
from chunktape._recorder import RecordingAdapter
from chunktape._replayer.options import ReplayOptions
from chunktape._replayer.playback import Hold, ReplayCall
from chunktape.faults._plan import ActiveFault, FaultPlan, reservation
from chunktape.providers._scripted import ScriptedError, ScriptedToolCall, ScriptedTurn, script_chunks

__all__ = ["Script", "ScriptEngine", "ScriptTurn", "load_script"]


class ScriptUsage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int | None = None
    reasoning_tokens: int | None = None


class ScriptError(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a turn fails: an HTTP error before any chunk (``status``), or, ``after_chunks`` in, an in-band error
    (with a ``status``) or a broken connection (``code = "STREAM_ABORTED"``)."""

    status: Annotated[int, msgspec.Meta(ge=400, le=599)] | None = None
    code: str | None = None
    message: str = "scripted failure"
    retry_after: float | None = None
    after_chunks: Annotated[int, msgspec.Meta(ge=0)] = 0


class Pace(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    first_chunk_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    between_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0


class ScriptTurn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One scripted answer (see the module docstring)."""

    when: str | None = None
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ScriptedToolCall] = []
    usage: ScriptUsage | None = None
    finish: FinishKind | None = None
    error: ScriptError | None = None
    repeat: bool = False

    def scripted(self) -> ScriptedTurn:
        usage = None if self.usage is None else TokenUsage(**msgspec.structs.asdict(self.usage))
        error = None
        if self.error is not None:
            code = self.error.code or ErrorCode.PROVIDER_HTTP_ERROR.value
            error = ScriptedError(
                code=code,
                message=self.error.message,
                status=self.error.status,
                retry_after=self.error.retry_after,
                after_chunks=self.error.after_chunks,
            )
        return ScriptedTurn(
            text=self.text,
            reasoning=self.reasoning,
            tool_calls=self.tool_calls,
            usage=usage,
            finish=self.finish,
            error=error,
        )


class Script(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    turns: list[ScriptTurn]
    pace: Pace = Pace()
    model: str = "scripted"
    """The model the provider says it is, when a request names none (the request's own is answered)."""


def load_script(path: str | Path) -> Script:
    """Read a script file; a bad one is ``INVALID_CONFIG`` naming the field."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise LlmError(f"{path}: cannot read the script ({error.strerror})", ErrorCode.INVALID_CONFIG) from None
    try:
        if path.suffix == ".json":
            script = msgspec.json.decode(data, type=Script)
        else:
            script = msgspec.toml.decode(data, type=Script)
    except (msgspec.DecodeError, msgspec.ValidationError, LlmError) as error:
        message = error.message if isinstance(error, LlmError) else str(error)
        raise LlmError(f"{path}: not a script: {message}", ErrorCode.INVALID_CONFIG) from None
    if not script.turns:
        raise LlmError(f"{path}: the script has no [[turns]]", ErrorCode.INVALID_CONFIG)
    for number, turn in enumerate(script.turns):
        if turn.when is not None:
            try:
                re.compile(turn.when)
            except re.error as error:
                raise LlmError(
                    f"{path}: turns[{number}].when is not a regex: {error}", ErrorCode.INVALID_CONFIG
                ) from None
        if turn.error is not None and turn.error.code is not None and turn.error.code not in ErrorCode.__members__:
            raise LlmError(
                f"{path}: turns[{number}].error.code {turn.error.code!r} is not an error code "
                f"(valid: {', '.join(ErrorCode)})",
                ErrorCode.INVALID_CONFIG,
            )
        turn.scripted()  # the tool calls' arguments, the error's code: checked now
    return script


class _Source(LlmAdapter):
    """The recorder's inner adapter: streams the turn the engine chose for each call."""

    def __init__(self, engine: ScriptEngine) -> None:
        self._engine = engine
        self.chosen: dict[int, ScriptTurn] = {}

    @property
    def name(self) -> str:
        return "scripted-provider"

    def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        return self._engine.turn_stream(self.chosen.pop(id(options)), options)


class ScriptEngine:
    """What answers a scripted server's requests: the script's turns, the faults on top, and, with ``record``, the
    recorder of what it answered. It offers what the server reads of a replay engine (``open``, ``calls``,
    ``injected``, ``play_counts``, ``fault_plan``, ``assert_all_played``)."""

    def __init__(
        self, script: Script, replay_options: ReplayOptions, *, record: Path | None = None, path: str = "the script"
    ) -> None:
        self.script = script
        self.replay_options = replay_options
        self.fault_plan = FaultPlan(replay_options.faults)
        self.injected: list[str | None] = []
        self.calls = 0
        self.play_counts = [0] * len(script.turns)
        self.path = path
        self.where = path
        self._patterns = [None if turn.when is None else re.compile(turn.when) for turn in script.turns]
        self._source = _Source(self)
        self.recorder = None if record is None else RecordingAdapter(self._source, record)

    def reset(self) -> None:
        """Forget which turns were answered and every fault's call count (``POST /reset``)."""
        self.fault_plan = FaultPlan(self.replay_options.faults)
        self.injected = []
        self.calls = 0
        self.play_counts = [0] * len(self.script.turns)

    def _choose(self, options: GenerateOptions) -> int:
        last = options.messages[-1].text if options.messages else ""
        for index, turn in enumerate(self.script.turns):
            pattern = self._patterns[index]
            if (turn.repeat or self.play_counts[index] == 0) and (pattern is None or pattern.search(last)):
                self.play_counts[index] += 1
                return index
        raise LlmError(
            f"no scripted turn is left for this request (last message {last[:60]!r}): every turn that matches was "
            f"answered; add turns to {self.path}, or let one answer again with repeat = true",
            ErrorCode.CASSETTE_EXHAUSTED,
        )

    def _give_back(self, index: int) -> None:
        self.play_counts[index] -= 1

    def open(self, options: GenerateOptions, *, sent: str = "") -> ReplayCall:
        """The next call's turn; ``sent``: how the client sent it (``sent_as``), so a recording numbers its attempts
        as the recording transport does."""
        self.calls += 1
        fault = self.fault_plan.select(options) if self.fault_plan else None
        self.injected.append(None if fault is None else fault.fault_id)
        hold = Hold(self._give_back)
        return ReplayCall(
            call=self.calls,
            fault_id=None if fault is None else fault.fault_id,
            chunks=self._play(options, fault, hold, sent),
            hold=hold,
        )

    async def _play(
        self, options: GenerateOptions, fault: ActiveFault | None, hold: Hold, sent: str
    ) -> AsyncGenerator[StreamChunk, None]:
        with reservation(fault, lambda: hold.take(self._choose(options)), hold.release) as index:
            turn = self.script.turns[index]
            chunks: AsyncIterator[StreamChunk]
            if self.recorder is not None and fault is None:  # a faulted call would record the fault, not the script
                self._source.chosen[id(options)] = turn
                chunks = self.recorder.record(options, RecordedRequest.from_options(options), sent=sent)
            else:
                chunks = self.turn_stream(turn, options)
            if fault is not None:
                chunks = fault.wrap(chunks, options.signal)
            try:
                async for chunk in chunks:
                    yield chunk
            finally:
                await aclose_stream(chunks)

    async def turn_stream(self, turn: ScriptTurn, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        scripted = turn.scripted()
        pace = self.script.pace
        chunks = script_chunks(scripted, max_tokens=options.max_tokens)
        fail_at = scripted.error.after_chunks if scripted.error is not None else -1
        for position, chunk in enumerate(chunks):
            if position == fail_at and scripted.error is not None:
                raise scripted.error.to_error()
            await abort.sleep(pace.first_chunk_s if position == 0 else pace.between_s, options.signal)
            yield chunk
        if scripted.error is not None:
            raise scripted.error.to_error()

    def assert_all_played(self, **_: Any) -> None:
        unplayed = [index for index, count in enumerate(self.play_counts) if count == 0]
        if unplayed:
            raise AssertionError(f"{len(unplayed)} scripted turn(s) of {self.path} were never answered: {unplayed}")

    def save(self) -> Path | None:
        """Write what was recorded (with ``record``), as ``chunktape record`` would keep it."""
        if self.recorder is None or not self.recorder.interactions:
            return None
        self.recorder.save(failed=False)
        return self.recorder.path
