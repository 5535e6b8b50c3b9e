"""The reference consumer: ``stream_with_retry`` turns an adapter's chunks into harness events, with retries.

The default ``RetryPolicy`` is the seed's table:

==========================================  =======  ===========
error                                       retries  backoff
==========================================  =======  ===========
429 rate limit                              3        exponential
timeout: ``TIMEOUT``, 408, ``STREAM_ABORTED``  2        fixed
5xx server error                            2        exponential
401, 400 and every other error              0        --
==========================================  =======  ===========

The k-th retry of a class waits ``retry_delay * retry_multiplier ** (k - 1)`` (exponential, capped at
``max_delay``) or ``retry_delay`` (fixed); a ``Retry-After`` on the error wins over the computed delay, when it
is a finite number of seconds >= 0 (capped at a day; any other value falls back to the computed delay).
``max_retries`` caps the retries of one call over all classes. Delays go through ``asyncio.sleep`` (virtual
time under ``looptime``) and end early when the request's abort signal fires.

How a call ends:

* the stream finished cleanly: ``DoneEvent(stop | tool_use | length)`` with the usage;
* a non-recoverable error (401, 400, a protocol violation, unparseable tool arguments, a reasoning effort
  the adapter does not offer -- ``UNSUPPORTED_OPTION``, checked before ``stream()`` is called), or retries
  exhausted: an ``ErrorEvent`` then ``DoneEvent(reason="error", error=...)``;
* the abort signal fired: ``DoneEvent(reason="cancel")``, promptly, also in the middle of a delay;
* the consuming task was cancelled or the generator closed: observers get ``DoneEvent(reason="cancel")`` on
  ``llm/stream/end`` and the cancellation propagates (swallowing it would break ``asyncio.timeout``).

The stream is validated as it flows (``StreamValidator``); a violation ends the call as an error, never as a
bare exception. A stream that ends without a ``finish`` chunk was cut off: it is treated as
``STREAM_ABORTED`` and retried. Any other exception from the adapter becomes ``INVALID_RESPONSE``.

How the standard faults (``chunktape.faults.STANDARD_FAULTS``) end, with the default policy:

* ``http-429``, ``http-500``, ``http-503``, every ``disconnect-*`` and ``truncate``: retried; when the fault
  hits once, the call completes as if nothing happened (after an ``ErrorEvent(will_retry=True)``); when it
  hits every call, ``DoneEvent(reason="error")`` once the retries are spent;
* ``stall-30s``: served late but complete; with ``idle_timeout`` below 30 s it becomes a retried ``TIMEOUT``;
* ``http-401``, ``http-400`` and every ``corrupt-*``: ``DoneEvent(reason="error")`` at once, no retry.

Text streams live; tool calls are handed out only after the attempt finished cleanly. After a retry the
next attempt's text starts over (see ``chunktape.harness._events``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Literal, TypeAlias

import msgspec

from chunktape import _abort as abort
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import (
    BlockEnd,
    FinishKind,
    GenerateOptions,
    LlmAdapter,
    ReasoningDelta,
    Reply,
    ReplyBuilder,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    aclose_stream,
    check_reasoning,
)
from chunktape._validation import StreamValidator
from chunktape.harness._events import (
    DoneEvent,
    DoneReason,
    ErrorEvent,
    HarnessEvent,
    ReasoningEvent,
    TextEvent,
    ToolCallEvent,
)
from chunktape.harness._metrics import (
    STREAM_CHUNK,
    STREAM_END,
    STREAM_ERROR,
    STREAM_START,
    StreamMetrics,
    StreamObserver,
    StreamStart,
    logger,
)
from chunktape.wire._http_errors import clamp_retry_after

__all__ = [
    "ErrorClass",
    "RetryPolicy",
    "RetryRule",
    "stream_with_retry",
]

ErrorClass: TypeAlias = Literal["rate_limit", "timeout", "server_error"]
Backoff: TypeAlias = Literal["exponential", "fixed"]

_NonNeg = Annotated[float, msgspec.Meta(ge=0)]

_DONE_REASONS: dict[FinishKind, DoneReason] = {
    "stop": "stop",
    "tool-calls": "tool_use",
    "length": "length",
    "content-filter": "stop",
    "error": "error",
    "cancelled": "cancel",
}


def _config_error(field: str, problem: str) -> LlmError:
    return LlmError(f"invalid RetryPolicy: {field} {problem}", ErrorCode.INVALID_CONFIG)


class RetryRule(msgspec.Struct, frozen=True, kw_only=True):
    """How often one class of error is retried, and how the delay grows."""

    retries: Annotated[int, msgspec.Meta(ge=0)]
    backoff: Backoff = "exponential"

    def __post_init__(self) -> None:
        if type(self.retries) is not int or self.retries < 0:
            raise _config_error("retries", f"must be an integer >= 0, got {self.retries!r}")
        if self.backoff not in ("exponential", "fixed"):
            raise _config_error("backoff", f"must be 'exponential' or 'fixed', got {self.backoff!r}")


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """When to retry and how long to wait; the defaults are the seed's table (see the module docstring)."""

    max_retries: Annotated[int, msgspec.Meta(ge=0)] = 3
    retry_delay: _NonNeg = 1.0
    """Seconds before the first retry (the seed's ``retryDelay``, 1000 ms)."""
    retry_multiplier: Annotated[float, msgspec.Meta(ge=1)] = 2.0
    max_delay: _NonNeg = 30.0
    """Cap on a computed delay (not on a server's Retry-After)."""
    rate_limit: RetryRule = RetryRule(retries=3, backoff="exponential")
    timeout: RetryRule = RetryRule(retries=2, backoff="fixed")
    server_error: RetryRule = RetryRule(retries=2, backoff="exponential")
    idle_timeout: _NonNeg | None = None
    """Seconds without a chunk after which the attempt fails with ``TIMEOUT`` (None: wait forever)."""

    def __post_init__(self) -> None:
        if type(self.max_retries) is not int or self.max_retries < 0:
            raise _config_error("max_retries", f"must be an integer >= 0, got {self.max_retries!r}")
        for name in ("retry_delay", "max_delay", "idle_timeout"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise _config_error(name, f"must be a finite number of seconds >= 0, got {value!r}")
        if not math.isfinite(self.retry_multiplier) or self.retry_multiplier < 1:
            raise _config_error("retry_multiplier", f"must be >= 1, got {self.retry_multiplier!r}")

    def classify(self, error: LlmError) -> ErrorClass | None:
        """The retry class of an error, or None when it is never retried (``LlmError.recoverable`` decides)."""
        if not error.recoverable:
            return None
        if error.code is ErrorCode.PROVIDER_HTTP_ERROR and error.status == 429:
            return "rate_limit"
        if error.code is ErrorCode.PROVIDER_HTTP_ERROR and error.status != 408:
            return "server_error"  # recoverable HTTP errors are 408, 429 and 5xx
        return "timeout"  # TIMEOUT, STREAM_ABORTED and HTTP 408

    def rule(self, error_class: ErrorClass) -> RetryRule:
        match error_class:
            case "rate_limit":
                return self.rate_limit
            case "timeout":
                return self.timeout
            case "server_error":
                return self.server_error

    def delay(self, error: LlmError, retry: int) -> float:
        """Seconds to wait before the ``retry``-th (1-based) retry of this error's class."""
        waited = clamp_retry_after(error.retry_after)  # a NaN, negative or endless Retry-After is not a wait
        if waited is not None:
            return waited
        error_class = self.classify(error)
        if error_class is None or self.rule(error_class).backoff == "fixed":
            return min(self.retry_delay, self.max_delay)
        return min(self.retry_delay * self.retry_multiplier ** (retry - 1), self.max_delay)

    def next_delay(self, error: LlmError, retries: dict[ErrorClass, int], total: int) -> float | None:
        """The delay before retrying ``error``, or None when it must not be retried."""
        error_class = self.classify(error)
        if error_class is None or total >= self.max_retries:
            return None
        done = retries.get(error_class, 0)
        if done >= self.rule(error_class).retries:
            return None
        return self.delay(error, done + 1)


class _AttemptFailed(Exception):
    def __init__(self, error: LlmError) -> None:
        super().__init__(error.message)
        self.error = error


def stream_with_retry(
    adapter: LlmAdapter,
    options: GenerateOptions,
    policy: RetryPolicy | None = None,
    *,
    on_event: StreamObserver | None = None,
    metrics: StreamMetrics | None = None,
) -> AsyncGenerator[HarnessEvent, None]:
    """Stream one generation as harness events, retrying per ``policy``; always ends with one ``DoneEvent``.

    ``metrics`` (optional) is filled in as the call goes, also when the task is cancelled; the final
    ``DoneEvent.metrics`` is the same object. Closing the returned generator closes the adapter's stream.
    """
    return _Run(adapter, options, policy or RetryPolicy(), on_event, metrics or StreamMetrics()).events()


class _Run:
    """The state of one ``stream_with_retry`` call."""

    def __init__(
        self,
        adapter: LlmAdapter,
        options: GenerateOptions,
        policy: RetryPolicy,
        on_event: StreamObserver | None,
        metrics: StreamMetrics,
    ) -> None:
        self.adapter = adapter
        self.options = options
        self.policy = policy
        self.on_event = on_event
        self.metrics = metrics
        self.signal = options.signal
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started = 0.0
        self.ended = False

    def _now(self) -> float:
        assert self.loop is not None
        return self.loop.time()

    def _notify(self, name: str, payload: object) -> None:
        if self.on_event is not None:
            self.on_event(name, payload)

    def _done(
        self,
        reason: DoneReason,
        *,
        usage: TokenUsage | None = None,
        error: LlmError | None = None,
        finish: FinishKind | None = None,
        reply: Reply | None = None,
    ) -> DoneEvent:
        self.ended = True
        self.metrics.total_duration = self._now() - self.started
        if usage is not None:
            self.metrics.token_usage = usage
        done = DoneEvent(reason=reason, usage=usage, error=error, finish=finish, metrics=self.metrics, reply=reply)
        total = None if usage is None else usage.input_tokens + usage.output_tokens
        logger.info("stream ended: reason=%s, tokens=%s, attempts=%d", reason, total, self.metrics.attempts)
        self._notify(STREAM_END, done)
        return done

    async def events(self) -> AsyncGenerator[HarnessEvent, None]:
        self.loop = asyncio.get_running_loop()
        self.started = self.loop.time()
        retries: dict[ErrorClass, int] = {}
        try:
            while True:
                self.metrics.attempts += 1
                attempt = self.metrics.attempts
                yielded_output = False
                try:
                    async with contextlib.aclosing(self._attempt(attempt)) as attempt_events:
                        async for event in attempt_events:
                            if isinstance(event, DoneEvent):
                                yield event
                                return
                            yielded_output = yielded_output or isinstance(event, TextEvent | ReasoningEvent)
                            yield event
                    raise AssertionError("an attempt always ends with a DoneEvent or an error")  # pragma: no cover
                except _AttemptFailed as failed:
                    error = failed.error
                if error.code is ErrorCode.CANCELLED or (self.signal is not None and self.signal.aborted):
                    yield self._done("cancel", error=error)
                    return
                delay = self.policy.next_delay(error, retries, self.metrics.retry_count)
                event = ErrorEvent(
                    error=error,
                    recoverable=error.recoverable,
                    retry_after=delay,
                    will_retry=delay is not None,
                    partial=yielded_output,
                    attempt=attempt,
                )
                self._notify(STREAM_ERROR, event)
                yield event
                if delay is None:
                    logger.warning("stream failed for good: %s", error)
                    yield self._done("error", error=error)
                    return
                error_class = self.policy.classify(error)
                assert error_class is not None
                retries[error_class] = retries.get(error_class, 0) + 1
                self.metrics.retry_count += 1
                allowed = min(self.policy.rule(error_class).retries, self.policy.max_retries)
                logger.warning(
                    "%s retry %d/%d in %.3fs after: %s", error_class, retries[error_class], allowed, delay, error
                )
                try:
                    await abort.sleep(delay, self.signal)
                except LlmError as cancelled:
                    yield self._done("cancel", error=cancelled)
                    return
        except (asyncio.CancelledError, GeneratorExit):
            if not self.ended:
                self._done("cancel", error=LlmError("the consumer stopped the stream", ErrorCode.CANCELLED))
            raise

    async def _next(self, stream: AsyncIterator[StreamChunk]) -> StreamChunk:
        idle = self.policy.idle_timeout
        if idle is None:
            return await anext(stream)
        try:
            async with asyncio.timeout(idle) as scope:
                return await anext(stream)
        except TimeoutError:
            if scope.expired():
                raise LlmError(f"no chunk within {idle:g}s (idle_timeout)", ErrorCode.TIMEOUT) from None
            raise

    async def _attempt(self, attempt: int) -> AsyncGenerator[HarnessEvent, None]:
        """One call to the adapter: yields its events and a final DoneEvent, or raises ``_AttemptFailed``."""
        options = self.options
        start = StreamStart(
            model=options.model, message_count=len(options.messages), tool_count=len(options.tools), attempt=attempt
        )
        logger.info("stream started: model=%s, attempt=%d", options.model, attempt)
        self._notify(STREAM_START, start)
        validator = StreamValidator()
        fold = ReplyBuilder()
        pending: list[ToolCallEvent] = []
        stream: AsyncIterator[StreamChunk] | None = None
        try:
            try:
                if self.signal is not None:
                    self.signal.throw_if_aborted()
                check_reasoning(self.adapter, options)
                stream = self.adapter.stream(options)
                while True:
                    try:
                        chunk = await self._next(stream)
                    except StopAsyncIteration:
                        break
                    self.metrics.chunk_count += 1
                    if self.metrics.ttfb is None:
                        self.metrics.ttfb = self._now() - self.started
                    logger.debug("chunk: type=%s", type(chunk).__name__)
                    self._notify(STREAM_CHUNK, chunk)
                    validator.feed(chunk)
                    fold.feed(chunk)
                    match chunk:
                        case TextDelta():
                            yield TextEvent(text=chunk.text, index=chunk.index, attempt=attempt)
                        case ReasoningDelta():
                            yield ReasoningEvent(text=chunk.text, index=chunk.index, attempt=attempt)
                        case BlockEnd(block=ToolCallBlock(cut=False) as block):  # a cut call cannot be run
                            pending.append(ToolCallEvent.from_block(block, chunk.index, attempt))
                        case _:
                            pass
                    if self.signal is not None:
                        self.signal.throw_if_aborted()
                reply = fold.reply()  # raises STREAM_ABORTED when the finish chunk never came
                validator.close()
            except LlmError as failure:
                raise _AttemptFailed(failure) from None
            except Exception as exc:
                wrapped = LlmError(
                    f"the adapter raised {type(exc).__name__}: {exc}", ErrorCode.INVALID_RESPONSE, cause=exc
                )
                raise _AttemptFailed(wrapped) from None
        finally:
            if stream is not None:
                await aclose_stream(stream)
        for event in pending:
            self.metrics.tool_call_count += 1
            yield event
        reason = _DONE_REASONS[reply.finish.kind]
        finish_error = None
        if reason == "error":
            detail = reply.finish.detail or "no detail"
            finish_error = LlmError(f"the provider finished with an error ({detail})", ErrorCode.INVALID_RESPONSE)
        yield self._done(reason, usage=reply.usage, error=finish_error, finish=reply.finish.kind, reply=reply)
