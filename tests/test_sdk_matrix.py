"""The SDK matrix, fault-free: each SDK x client records through ``RecordingTransport`` against the loopback
stand-in provider, then replays offline through ``ReplayTransport`` (in process) and through a ``ReplayServer``
(the server behind the ``tape_server_url`` fixture), with the same text and tool calls.

The faults (a 429 once, a disconnect mid-stream) are ``tests/test_sdk_faults.py``; anthropic, whose Messages
protocol is not recorded yet, is there too, at the transport level.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chunktape import Timing
from chunktape.http import ReplayServer, ReplayTransport
from fake_provider import FakeProvider
from sdk_agents import SDKS, Kind, cells, quiet_litellm, record, run

OFFLINE = "http://127.0.0.1:9/v1"
"""Where an in-process replay points: nothing listens there, and ReplayTransport never opens a socket."""

pytestmark = pytest.mark.usefixtures(quiet_litellm.__name__)


@pytest.mark.parametrize(("name", "kind"), cells())
async def test_records_then_replays_in_process_and_through_the_server(
    name: str, kind: Kind, fake_provider: FakeProvider, tmp_path: Path
) -> None:
    sdk = SDKS[name]
    path = tmp_path / "agent.msgpack"
    await record(sdk, kind, fake_provider, path)
    seen = len(fake_provider.requests)

    replay = ReplayTransport(path)
    assert await run(sdk, OFFLINE, sdk.client(kind, replay)) == sdk.expected
    replay.assert_all_played()

    with ReplayServer(path, timing=Timing.instant()) as server:
        assert await run(sdk, server.url + "/v1", sdk.client(kind)) == sdk.expected
        server.playback.assert_all_played()
    assert len(fake_provider.requests) == seen  # the replays never reached the provider
