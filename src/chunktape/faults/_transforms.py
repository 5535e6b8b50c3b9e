"""The stream transforms of the fault catalogue, written once, for any layer that carries a stream.

A transform never inspects an item itself: it asks the layer's ``Codec`` whether the item is a chunk, how
many bytes it carries, whether it ends the answer, and how that layer breaks. Chunk streams use
``chunktape.faults._chunks.CHUNKS``; HTTP bodies the SSE-frame codec of ``chunktape.faults._sse``. So a
``Stall`` honours the abort signal and shifts the schedule, and a ``Disconnect`` never lets the finish through,
on both layers alike. Nothing here knows a wire protocol.

Time is the running loop's clock (``loop.time()``, ``asyncio.sleep``), so a schedule runs the same in real and in
virtual time; a wait is ``chunktape._virtual_time.pause`` (through ``abort.sleep``), which in a server's task is a
silence declared towards its client, and a ``Disconnect(after_s=...)`` cuts those silences at its deadline on that
client's clock (``cut_at``). Every transform closes its source when it is closed.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from typing import Protocol, TypeVar, assert_never

from chunktape import _abort as abort
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import AbortSignal, BlockType, aclose_stream
from chunktape._virtual_time import CutShort, cut_at, now
from chunktape.faults._specs import (
    Corrupt,
    Disconnect,
    HttpError,
    Latency,
    Stall,
    StreamError,
    StreamFault,
    Truncate,
)

__all__ = ["Codec", "Corrupter", "apply", "http_error"]

T = TypeVar("T")
MALFORMED_VARIANTS = 3
"""How many forms of unparseable data a layer offers ``Corrupt(kind="malformed-data")`` (picked by seed)."""


class Corrupter(Protocol[T]):
    """Rewrites a stream, item by item, so that it breaks one rule of its layer."""

    def feed(self, item: T) -> list[T]:
        """The items to emit in place of ``item``."""
        ...

    def end(self) -> list[T]:
        """The items to emit when the source ends."""
        ...


class Codec(Protocol[T]):
    """What the transforms need to know about the items of one layer (a chunk, an SSE frame)."""

    @property
    def can_cut(self) -> bool:
        """Whether part of an item can be delivered (bytes can, a chunk cannot): a disconnect then cuts inside
        the next item instead of before it."""
        ...

    @property
    def bytes_of(self) -> str:
        """What ``Disconnect.after_bytes`` counts on this layer, as messages say it (``of the body``)."""
        ...

    def counts(self, item: T) -> bool:
        """Whether the item is a chunk for ``after_chunks`` (others pass through uncounted)."""
        ...

    def paced(self, item: T) -> bool:
        """Whether ``Latency`` delays the item."""
        ...

    def finishes(self, item: T) -> bool:
        """Whether the item ends the answer: a disconnect never lets it through."""
        ...

    def tail(self, item: T) -> bool:
        """Whether the item is the answer's tail (usage or finish): a truncated stream stops before it."""
        ...

    def size(self, item: T) -> int:
        """The bytes ``Disconnect.after_bytes`` counts for the item."""
        ...

    def cut(self, item: T, size: int | None) -> T:
        """The start of ``item`` (``size`` bytes, or about half): what arrived before the connection broke."""
        ...

    def carries(self, item: T, kind: BlockType) -> bool:
        """Whether the item carries content of a block of ``kind``."""
        ...

    def opens(self, item: T) -> BlockType | None:
        """The type of block the item opens, if it opens one."""
        ...

    def closes(self, item: T) -> bool:
        """Whether the item closes a block."""
        ...

    def aborted(self, message: str) -> Exception:
        """The error a broken connection raises on this layer."""
        ...

    def malformed(self, variant: int, label: str) -> T:
        """Data a client cannot parse, in one of ``MALFORMED_VARIANTS`` forms (or the error parsing it raises)."""
        ...

    def corrupter(self, fault: Corrupt, label: str) -> Corrupter[T]:
        """The rewriter for a protocol ``Corrupt`` kind; ``INVALID_CONFIG`` for a kind the layer cannot express."""
        ...

    def reported(self, error: LlmError) -> T:
        """The provider's in-band report of ``error`` once the stream started (an error event on the wire); a layer
        that has no such item raises ``error`` instead."""
        ...


def http_error(fault: HttpError | StreamError, label: str) -> LlmError:
    """The ``PROVIDER_HTTP_ERROR`` an injected ``HttpError`` raises before any chunk (a ``StreamError``, later)."""
    text = fault.message or "provider error"
    return LlmError(
        f"HTTP {fault.status}: {text} [{label}]",
        ErrorCode.PROVIDER_HTTP_ERROR,
        status=fault.status,
        retry_after=fault.retry_after,
    )


def apply(
    fault: StreamFault,
    label: str,
    items: AsyncIterator[T],
    codec: Codec[T],
    signal: AbortSignal | None,
    delayed: Callable[[float], None],
) -> AsyncIterator[T]:
    """The faulty view of ``items``. ``label`` names the fault in errors; ``delayed(s)`` hears every delay
    injected mid-stream, so a timed source shifts its schedule; ``signal`` ends a delay at once."""
    match fault:
        case HttpError():
            return _http(http_error(fault, label), items)
        case StreamError():
            return _stream_error(fault, http_error(fault, label), items, codec)
        case Disconnect():
            return _disconnect(fault, label, items, codec)
        case Stall():
            return _stall(fault, items, codec, signal, delayed)
        case Latency():
            return _latency(fault, items, codec, signal, delayed)
        case Truncate():
            return _truncate(fault, items, codec)
        case Corrupt():
            if fault.kind == "malformed-data":
                return _malformed(fault, label, items, codec)
            return _corrupt(codec.corrupter(fault, label), items)
    assert_never(fault)


async def _http(error: LlmError, items: AsyncIterator[T]) -> AsyncIterator[T]:
    try:
        raise error
        yield  # pragma: no cover - makes this an async generator
    finally:
        await aclose_stream(items)


async def _stream_error(
    fault: StreamError, error: LlmError, items: AsyncIterator[T], codec: Codec[T]
) -> AsyncIterator[T]:
    """The items up to ``after_chunks`` chunks (never the finish), then the provider's report of ``error``."""
    seen = 0
    try:
        async for item in items:
            counted = codec.counts(item)
            if counted and (seen >= fault.after_chunks or codec.finishes(item)):
                break
            yield item
            seen += counted
        yield codec.reported(error)
    finally:
        await aclose_stream(items)


async def _disconnect(fault: Disconnect, label: str, items: AsyncIterator[T], codec: Codec[T]) -> AsyncIterator[T]:
    # ``after_s`` is kept twice: on the loop's timers (a body waited on from a real network ends there) and on the
    # clock of the client a server answers (``now()``, with ``cut_at``: the replay's own waits are declared silences
    # cut at the deadline, so a virtual-time client's clock jumps to the disconnect rather than waiting it out).
    loop = asyncio.get_running_loop()
    deadline = None if fault.after_s is None else loop.time() + fault.after_s
    cut = None if fault.after_s is None else now() + fault.after_s
    seen = 0  # chunks delivered
    sent = 0  # bytes delivered
    in_target = False

    def broken(where: str) -> Exception:
        return codec.aborted(f"{where} [{label}]")

    try:
        while True:
            if fault.after_chunks is not None and seen >= fault.after_chunks and not codec.can_cut:
                raise broken(f"after {seen} chunk(s)")  # before reading on: the next item never arrives
            if deadline is not None and cut is not None and (loop.time() >= deadline or now() >= cut):
                raise broken(f"after {fault.after_s:g}s")
            try:
                if deadline is None or cut is None:
                    item = await anext(items)
                else:
                    with cut_at(cut):
                        async with asyncio.timeout_at(deadline):
                            item = await anext(items)
            except StopAsyncIteration:
                raise broken(f"at the end of the stream, after {seen} chunk(s)") from None
            except (TimeoutError, CutShort):
                raise broken(f"after {fault.after_s:g}s") from None
            counted = codec.counts(item)
            if counted and codec.finishes(item):
                raise broken(f"before the finish, after {seen} chunk(s)")
            if counted and fault.after_chunks is not None and seen >= fault.after_chunks:
                yield codec.cut(item, None)
                raise broken(f"after {seen} chunk(s)")
            if fault.inside is not None:
                opened = codec.opens(item)
                if opened is not None:
                    in_target = opened == fault.inside
                elif in_target and codec.closes(item):
                    raise broken(f"inside a {fault.inside} block, after {seen} chunk(s)")
            if fault.after_bytes is not None:
                size = codec.size(item)
                if sent + size >= fault.after_bytes:
                    if codec.can_cut:
                        yield codec.cut(item, fault.after_bytes - sent)
                        raise broken(f"after {fault.after_bytes} byte(s) {codec.bytes_of}")
                    yield item  # an item that cannot be cut arrives whole
                    raise broken(f"after {sent + size} byte(s) {codec.bytes_of}")
                sent += size
            yield item
            seen += counted
            if fault.inside is not None and codec.carries(item, fault.inside):
                raise broken(f"inside a {fault.inside} block, after {seen} chunk(s)")
    finally:
        await aclose_stream(items)


async def _stall(
    fault: Stall,
    items: AsyncIterator[T],
    codec: Codec[T],
    signal: AbortSignal | None,
    delayed: Callable[[float], None],
) -> AsyncIterator[T]:
    seen = 0
    stalled = False
    try:
        async for item in items:
            counted = codec.counts(item)
            if counted and not stalled and seen == fault.after_chunks:
                stalled = True
                await abort.sleep(fault.seconds, signal)
                delayed(fault.seconds)
            seen += counted
            yield item
        if not stalled:  # a shorter stream stalls before it ends: the silence always happens
            await abort.sleep(fault.seconds, signal)
    finally:
        await aclose_stream(items)


async def _latency(
    fault: Latency,
    items: AsyncIterator[T],
    codec: Codec[T],
    signal: AbortSignal | None,
    delayed: Callable[[float], None],
) -> AsyncIterator[T]:
    rng = random.Random(fault.seed)
    first = True
    try:
        async for item in items:
            if codec.paced(item):
                delay = fault.first_chunk_s if first else fault.between_s
                if fault.jitter_s:
                    delay += rng.uniform(0, fault.jitter_s)
                first = False
                if delay > 0:
                    await abort.sleep(delay, signal)
                    delayed(delay)
            yield item
    finally:
        await aclose_stream(items)


async def _truncate(fault: Truncate, items: AsyncIterator[T], codec: Codec[T]) -> AsyncIterator[T]:
    seen = 0
    try:
        async for item in items:
            if codec.counts(item):
                if codec.tail(item) or seen >= fault.after_chunks:
                    return
                seen += 1
            yield item
    finally:
        await aclose_stream(items)


async def _malformed(fault: Corrupt, label: str, items: AsyncIterator[T], codec: Codec[T]) -> AsyncIterator[T]:
    """Unparseable data before chunk 1-3 (by seed), or before the tail when the stream is shorter."""
    rng = random.Random(fault.seed)
    at = rng.randrange(1, 4)
    variant = rng.randrange(MALFORMED_VARIANTS)
    seen = 0
    injected = False
    try:
        async for item in items:
            counted = codec.counts(item)
            if counted and not injected and (seen >= at or codec.tail(item)):
                injected = True
                yield codec.malformed(variant, label)
            seen += counted
            yield item
        if not injected:
            yield codec.malformed(variant, label)
    finally:
        await aclose_stream(items)


async def _corrupt(corrupter: Corrupter[T], items: AsyncIterator[T]) -> AsyncIterator[T]:
    try:
        async for item in items:
            for out in corrupter.feed(item):
                yield out
        for out in corrupter.end():
            yield out
    finally:
        await aclose_stream(items)
