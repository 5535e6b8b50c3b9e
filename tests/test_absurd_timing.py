"""A cassette whose first event and end are recorded at ``t_ns = 2**63 - 1`` replays in bounded time on every face:
each recorded wait past ``MAX_GAP_NS`` (one hour, the bound ``check`` flags) is replayed as that bound, divided by
the speed, with one ``SleepCappedWarning``; nothing sleeps for 292 years."""

from __future__ import annotations

import asyncio

import httpx
import httpx2
import pytest

from chunktape import Cassette, Completed, Event, Interaction, RecordedRequest, ReplayAdapter, Timing
from chunktape._cassettes import MAX_GAP_NS
from chunktape._replayer import SleepCappedWarning
from chunktape.http import ReplayServer, ReplayTransport
from helpers import collect, options, text_stream

FOREVER = 2**63 - 1


def _absurd() -> Cassette:
    chunks = text_stream("a", "b")
    events = [Event(t_ns=FOREVER, chunk=chunk) for chunk in chunks]
    request = RecordedRequest.from_options(options())
    return Cassette(interactions=[Interaction(request=request, events=events, outcome=Completed(t_ns=FOREVER))])


def test_the_offsets_of_an_absurd_recording_are_bounded_at_any_speed() -> None:
    interaction = _absurd().interactions[0]
    for speed in (1.0, 2.0, 3600.0):
        with pytest.warns(SleepCappedWarning, match="over the 3600 s bound"):
            due = Timing.recorded(speed=speed).offsets(interaction)
        assert max(due) == pytest.approx(MAX_GAP_NS / 1e9 / speed)


@pytest.mark.looptime
async def test_replay_adapter_and_replay_transport_end_after_the_bound_in_loop_time() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.warns(SleepCappedWarning):
        chunks = await collect(ReplayAdapter(_absurd(), timing=Timing.recorded()).stream(options()))
    assert chunks == text_stream("a", "b")
    assert loop.time() - start == pytest.approx(MAX_GAP_NS / 1e9, abs=1e-3)
    transport = ReplayTransport(_absurd(), timing=Timing.recorded())
    start = loop.time()
    # No read timeout: the client waits the hour out, as it would over a socket with timeout=None.
    async with httpx2.AsyncClient(transport=transport, base_url="http://replay.test", timeout=None) as client:
        body = {"model": options().model, "messages": [{"role": "user", "content": "hello"}], "stream": True}
        with pytest.warns(SleepCappedWarning):
            reply = await client.post("/v1/chat/completions", json=body)
    assert b"[DONE]" in reply.content
    assert loop.time() - start == pytest.approx(MAX_GAP_NS / 1e9, abs=1e-3)


def test_serve_replays_it_within_the_bound_over_the_speed() -> None:
    """At speed 36,000 the hour is a tenth of a second of real time: the stream ends (a hang would time out)."""
    body = {"model": options().model, "messages": [{"role": "user", "content": "hello"}], "stream": True}
    with pytest.warns(SleepCappedWarning), ReplayServer(_absurd(), timing=Timing.recorded(speed=36_000.0)) as server:
        reply = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=30)
    assert reply.status_code == 200
    assert b"[DONE]" in reply.content
