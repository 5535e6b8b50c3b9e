"""The faults package owns faults end to end: one set of transforms, one reservation call, constraints once."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import StreamChunk
from chunktape.faults import Disconnect, HttpError, Latency, Stall, StreamFault, Targeted
from chunktape.faults._plan import FaultPlan, reservation
from chunktape.providers._demo import DEMO_TURNS
from chunktape.providers._scripted import script_chunks
from fault_support import first_request, from_list

OPTIONS = first_request()
CHUNKS = script_chunks(DEMO_TURNS[0])


class Ledger:
    """A reserve/release pair that records what a call held and gave back."""

    def __init__(self) -> None:
        self.held: list[int] = []
        self.released: list[int] = []

    def reserve(self) -> int:
        self.held.append(len(self.held))
        return self.held[-1]

    def release(self, token: int) -> None:
        self.released.append(token)


async def _call(fault: StreamFault | None, read: Callable[[int], bool] = lambda position: True) -> Ledger:
    """One call through ``reservation``: stream until ``read(position)`` says stop, then close."""
    ledger = Ledger()
    active = FaultPlan([fault] if fault is not None else []).select(OPTIONS)
    with contextlib.suppress(LlmError), reservation(active, ledger.reserve, ledger.release):
        chunks = from_list(CHUNKS) if active is None else active.wrap(from_list(CHUNKS), None)
        try:
            position = 0
            async for _ in chunks:
                position += 1
                if not read(position):
                    break
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
    return ledger


async def test_an_http_error_fails_the_call_before_anything_is_held() -> None:
    ledger = await _call(HttpError(status=503))
    assert (ledger.held, ledger.released) == ([], [])


async def test_a_failing_fault_gives_the_interaction_back() -> None:
    ledger = await _call(Disconnect(after_chunks=2))
    assert (ledger.held, ledger.released) == ([0], [0])


@pytest.mark.looptime
async def test_a_served_stall_keeps_it_and_an_abandoned_one_gives_it_back() -> None:
    served = await _call(Stall(after_chunks=1, seconds=5))
    assert (served.held, served.released) == ([0], [])
    abandoned = await _call(Stall(after_chunks=1, seconds=5), read=lambda position: position < 3)
    assert (abandoned.held, abandoned.released) == ([0], [0])


async def test_without_a_fault_the_interaction_is_kept() -> None:
    ledger = await _call(None)
    assert (ledger.held, ledger.released) == ([0], [])


async def test_the_replay_adapter_releases_through_the_same_call() -> None:
    from fault_support import FaultyAdapter

    adapter = FaultyAdapter([DEMO_TURNS[0]], [Disconnect(after_chunks=1)], first_chunk_s=0)
    out: list[StreamChunk] = []
    with pytest.raises(LlmError):
        async for chunk in adapter.stream(OPTIONS):
            out.append(chunk)
    assert adapter.play_counts == [0]
    assert adapter.reserve(adapter.playback.as_recorded(OPTIONS)) == 0
    assert adapter.play_counts == [1]
    adapter.release(0)
    assert adapter.play_counts == [0]


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Latency(seed="7"), "Latency.seed"),  # type: ignore[arg-type]
        (lambda: HttpError(status=429, message=5), "HttpError.message"),  # type: ignore[arg-type]
        (lambda: Targeted(fault=HttpError(status=500), model=3), "Targeted.model"),  # type: ignore[arg-type]
    ],
)
def test_every_declared_field_type_is_checked_on_construction(build: Callable[[], object], field: str) -> None:
    with pytest.raises(LlmError) as caught:
        build()
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    assert field in str(caught.value)
