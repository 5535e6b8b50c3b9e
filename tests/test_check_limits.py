"""``check`` and replay under recorded data no real stream produces: impossible statuses, absurd timing."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import pytest

from chunktape import (
    Cassette,
    Completed,
    ErrorCode,
    Event,
    Interaction,
    LlmError,
    Raised,
    RecordedRequest,
    RecordingAdapter,
    ReplayAdapter,
    Timing,
    load_cassette,
    save_cassette,
)
from chunktape._cassettes import MAX_GAP_NS
from chunktape._replayer import SleepCappedWarning
from chunktape._report.analysis import check_cassette
from helpers import PacedAdapter, cassette_with_raised_status, collect, collect_until_error, options, text_stream

BAD_STATUSES = [1, 99, 100, 101, 200, 302, 600, 999, 1000, -1, 2**31]


MS = 1_000_000


def _interaction(*, shift_ns: int = 0, outcome_ns: int = 10 * MS, content: str = "hello") -> Interaction:
    """A text stream with a chunk every millisecond from ``shift_ns + 1 ms``, ending at ``shift_ns + outcome_ns``."""
    events = [Event(t_ns=shift_ns + MS * (n + 1), chunk=c) for n, c in enumerate(text_stream("a", "b"))]
    return Interaction(
        request=RecordedRequest.from_options(options(content)),
        events=events,
        outcome=Completed(t_ns=shift_ns + outcome_ns),
    )


# -- Raised.status -------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", BAD_STATUSES)
def test_check_rejects_a_raised_status_outside_400_to_599(tmp_path: Path, status: int) -> None:
    path = cassette_with_raised_status(tmp_path, status)
    (problem,) = check_cassette(path)
    assert problem.rule == "CASSETTE_CORRUPT"
    assert "outcome.status" in problem.detail
    with pytest.raises(LlmError) as caught:
        load_cassette(path)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT


@pytest.mark.parametrize("status", [400, 429, 599])
def test_error_statuses_pass_check(tmp_path: Path, status: int) -> None:
    assert check_cassette(cassette_with_raised_status(tmp_path, status)) == []


@pytest.mark.parametrize("status", BAD_STATUSES)
def test_the_model_refuses_to_build_a_raised_with_a_status_outside_400_to_599(status: int) -> None:
    with pytest.raises(LlmError, match=r"Raised\.status must be an HTTP error status") as caught:
        Raised(t_ns=0, code="PROVIDER_HTTP_ERROR", message="x", status=status)
    assert caught.value.code is ErrorCode.INVALID_CONFIG


def test_a_raised_without_status_is_fine() -> None:
    assert Raised(t_ns=0, code="STREAM_ABORTED", message="reset").status is None


async def test_a_provider_error_with_a_non_error_status_is_recorded_without_it(tmp_path: Path) -> None:
    """A 3xx the client did not follow still records: the status moves into the message, the file stays valid."""
    redirect = LlmError("the provider answered HTTP 302", ErrorCode.PROVIDER_HTTP_ERROR, status=302)
    path = tmp_path / "redirect.msgpack"
    async with RecordingAdapter(PacedAdapter([], error=redirect), path) as recorder:
        _, error = await collect_until_error(recorder.stream(options()))
    assert error is redirect
    outcome = load_cassette(path).interactions[0].outcome
    assert isinstance(outcome, Raised)
    assert (outcome.status, outcome.message) == (None, "the provider answered HTTP 302")
    assert check_cassette(path) == []
    odd = Raised.from_error(LlmError("moved", ErrorCode.PROVIDER_HTTP_ERROR, status=101), t_ns=3)
    assert (odd.status, odd.message, odd.t_ns) == (None, "moved (HTTP 101)", 3)


# -- timing bound --------------------------------------------------------------------------------------


def test_check_flags_timing_shifted_by_10_to_the_18(tmp_path: Path) -> None:
    path = tmp_path / "shifted.json"
    save_cassette(Cassette(interactions=[_interaction(), _interaction(shift_ns=10**18, content="late")]), path)
    (problem,) = check_cassette(path)
    assert (problem.interaction, problem.rule) == (1, "timing")
    assert "chunk #0" in problem.detail
    assert "31.7 years" in problem.detail
    assert "MAX_GAP_NS" in problem.detail


def test_check_flags_an_end_beyond_the_bound_and_accepts_one_at_it(tmp_path: Path) -> None:
    path = tmp_path / "slow.json"
    at_bound = _interaction(outcome_ns=MAX_GAP_NS)
    beyond = _interaction(outcome_ns=MAX_GAP_NS + 1, content="beyond")
    save_cassette(Cassette(interactions=[at_bound, beyond]), path)
    (problem,) = check_cassette(path)
    assert (problem.interaction, problem.rule) == (1, "timing")
    assert "the end of the stream" in problem.detail


def test_recorded_timing_caps_each_wait_at_the_bound_and_warns_once() -> None:
    bound = MAX_GAP_NS / 1e9
    interaction = _interaction(shift_ns=10**18)
    with pytest.warns(SleepCappedWarning, match="over the 3600 s bound") as caught:
        due = Timing.recorded().offsets(interaction)
    assert len(caught) == 1
    # The first wait (call to first chunk) becomes the bound; the rest keep their recorded gaps.
    recorded = [event.t_ns for event in interaction.events] + [interaction.outcome.t_ns]
    assert due == pytest.approx([bound + (t_ns - recorded[0]) / 1e9 for t_ns in recorded], rel=0, abs=1e-6)
    # A second long wait later in the stream is capped too, from where the replay has got to.
    events = [Event(t_ns=1, chunk=text_stream("a")[0]), Event(t_ns=3 * MAX_GAP_NS, chunk=text_stream("a")[1])]
    two = Interaction(request=interaction.request, events=events, outcome=Completed(t_ns=10 * MAX_GAP_NS))
    with pytest.warns(SleepCappedWarning, match=r"2 wait\(s\)"):
        assert Timing.recorded().offsets(two) == pytest.approx([1e-9, bound + 1e-9, 2 * bound + 1e-9], rel=0, abs=1e-6)


def test_timing_within_the_bound_is_replayed_as_recorded() -> None:
    interaction = _interaction(shift_ns=MAX_GAP_NS - 10 * MS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        due = Timing.recorded(speed=2.0).offsets(interaction)
    recorded = [event.t_ns for event in interaction.events] + [interaction.outcome.t_ns]
    assert due == pytest.approx([t_ns / 2e9 for t_ns in recorded], rel=0, abs=1e-9)


@pytest.mark.looptime
async def test_a_replay_of_a_31_year_gap_ends_after_at_most_the_bound_in_loop_time() -> None:
    cassette = Cassette(interactions=[_interaction(shift_ns=10**18)])
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.warns(SleepCappedWarning):
        chunks = await collect(ReplayAdapter(cassette, timing=Timing.recorded()).stream(options()))
    assert chunks == text_stream("a", "b")
    # The 31-year wait to the first chunk became one hour; the 9 ms after it were kept.
    assert loop.time() - start == pytest.approx(MAX_GAP_NS / 1e9 + 0.009, rel=0, abs=1e-4)
