"""The replay engine (``chunktape.playback``) under every face: one matching, one bookkeeping, one set of misses."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from chunktape import AbortController, ErrorCode, LlmError, ReplayAdapter, save_cassette
from chunktape._replayer import Hold, Playback
from chunktape._replayer.options import ReplayOptions
from chunktape.faults import FailFirst, HttpError
from chunktape.http import ReplayServer, ReplayTransport
from helpers import cassette_of, interaction_of, options, recorded_request, text_stream

BODY = b'{"model": "test-model", "messages": [{"role": "user", "content": "hello"}], "stream": true}'


def test_the_recording_proxy_is_part_of_the_http_face() -> None:
    from chunktape import http
    from chunktape.http._server.proxy import RecordingProxy

    assert http.RecordingProxy is RecordingProxy
    assert "RecordingProxy" in http.__all__


def test_as_recorded_redacts_like_the_recorder_so_a_live_request_with_a_key_still_matches() -> None:
    key = "not-a-pattern-" + "a1B2c3D4e5F6g7H8"
    recorded = recorded_request(f"my key is {key}")
    engine = Playback(cassette_of(interaction_of(text_stream("hi"))), ReplayOptions(redact=[key]))
    live = engine.as_recorded(options(f"my key is {key}"))
    assert key not in (live.messages[0].content or "")
    assert live.fingerprint != recorded.fingerprint  # the live request was redacted, the raw one was not
    assert engine.as_recorded(recorded) == live  # a RecordedRequest is taken as from_options made it


def test_the_adapter_is_a_face_over_its_engine_sharing_its_state() -> None:
    adapter = ReplayAdapter(cassette_of(interaction_of(text_stream("hi"))), faults=[FailFirst(1, HttpError(503))])
    engine = adapter.playback
    assert adapter.play_counts is engine.play_counts
    assert adapter.injected is engine.injected
    assert adapter.replay_options is engine.replay_options
    number, fault = engine.begin(options())
    assert fault is not None
    assert (number, adapter.calls, adapter.injected) == (1, 1, [fault.fault_id])


def test_an_aborted_call_is_counted_without_a_fault() -> None:
    engine = Playback(cassette_of(interaction_of(text_stream("hi"))), ReplayOptions(faults=["http-429"]))
    controller = AbortController()
    controller.abort()
    number, fault = engine.begin(options(signal=controller.signal))
    assert (number, fault, engine.injected) == (1, None, [])
    number, fault = engine.begin(options())
    assert number == 2
    assert fault is not None
    assert engine.injected == [fault.fault_id]


def test_a_hold_gives_back_what_an_injected_failure_did_not_use_up() -> None:
    engine = Playback(
        cassette_of(interaction_of(text_stream("hi"))), ReplayOptions(faults=["disconnect-after-first-chunk"])
    )
    _, fault = engine.begin(options())
    hold = Hold(engine.release)
    with engine.hold(fault, engine.as_recorded(options()), hold) as index:
        assert (index, hold.index, engine.play_counts) == (0, 0, [1])
    assert engine.play_counts == [0]  # the disconnect never reached the end: the retry replays it
    with engine.hold(None, engine.as_recorded(options()), Hold(engine.release)):
        pass
    assert engine.play_counts == [1]
    with pytest.raises(LlmError) as exhausted:
        engine.reserve(engine.as_recorded(options()))
    assert exhausted.value.code is ErrorCode.CASSETTE_EXHAUSTED


def test_the_transport_counts_its_calls_and_faults_in_its_engine(tmp_path: Path) -> None:
    path = tmp_path / "one.msgpack"
    save_cassette(cassette_of(interaction_of(text_stream("hi"))), path)
    transport = ReplayTransport(path, faults=[FailFirst(1, HttpError(503))])
    with httpx2.Client(transport=transport, base_url="http://127.0.0.1/v1") as client:
        assert client.post("/chat/completions", content=BODY).status_code == 503
        assert client.post("/chat/completions", content=BODY).status_code == 200
    engine = transport.playback
    assert isinstance(engine, Playback)
    assert (engine.calls, engine.play_counts) == (2, [1])
    assert transport.injected is engine.injected
    assert len(engine.injected) == 2
    assert engine.injected[0] is not None
    assert engine.injected[1] is None
    transport.assert_all_played()


def test_the_server_answers_from_the_same_engine(tmp_path: Path) -> None:
    path = tmp_path / "one.msgpack"
    save_cassette(cassette_of(interaction_of(text_stream("hi"))), path)
    with ReplayServer(path) as server, httpx2.Client(base_url=server.url + "/v1") as client:
        response = client.post("/chat/completions", content=BODY)
        assert response.status_code == 200
        assert b"[DONE]" in response.content
        engine = server.playback
        assert isinstance(engine, Playback)
        assert (engine.calls, engine.play_counts) == (1, [1])
