"""One replay configuration: ``ReplayOptions`` is validated once and every face takes it and passes it on as is;
one ``Timing``, written ``mode`` in files and JSON."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

import chunktape._cassettes.redaction as redaction
from chunktape import (
    Cassette,
    ErrorCode,
    LlmError,
    RecordedRequest,
    ReplayAdapter,
    ReplayOptions,
    Timing,
    save_cassette,
    use_cassette,
)
from chunktape._cassettes.model import Completed, Event, Interaction
from chunktape._replayer.options import ReplayKeywords
from chunktape.faults import STANDARD_FAULTS, HttpError
from chunktape.http import ReplayServer
from chunktape.http._server.scenarios import Scenario, parse_scenarios
from helpers import PacedAdapter, collect, options, paced, text_stream


def _cassette(tmp_path: Path) -> Path:
    chunks = text_stream("hi")
    events = [Event(t_ns=position * 1000, chunk=chunk) for position, chunk in enumerate(chunks)]
    interaction = Interaction(
        request=RecordedRequest.from_options(options()), events=events, outcome=Completed(t_ns=len(chunks) * 1000)
    )
    path = tmp_path / "c.msgpack"
    save_cassette(Cassette(interactions=[interaction]), path)
    return path


def test_the_keywords_are_the_fields() -> None:
    """The TypedDict that types every face's keywords lists exactly the options' fields."""
    fields = [field.name for field in dataclasses.fields(ReplayOptions)]
    assert list(typing.get_type_hints(ReplayKeywords)) == fields
    assert ReplayOptions().keywords().keys() == set(fields)


def test_values_are_parsed_once_into_typed_fields() -> None:
    built = ReplayOptions(
        faults=["http-429", {"type": "http-error", "status": 503}],
        match_on="model,messages",
        redact=["literal-secret"],
        allow_secrets=["sk-not-a-real-key"],
    )
    assert built.faults == (STANDARD_FAULTS["http-429"], HttpError(status=503))
    assert built.match_on == ("model", "messages")
    assert built.redact == ("literal-secret",)
    assert built.allow_secrets == ("sk-not-a-real-key",)
    assert built.timing == Timing.instant()


def test_options_are_frozen_compared_by_value_and_hashable() -> None:
    first = ReplayOptions(timing=Timing.recorded(2.0), faults=["http-500"])
    second = ReplayOptions(timing=Timing.recorded(2.0), faults=[STANDARD_FAULTS["http-500"]])
    assert first == second
    assert hash(first) == hash(second)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(first, "allow_repeats", True)  # noqa: B010 - the point is that it fails


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"timng": Timing.instant()}, "unknown replay option(s) timng; valid: timing, faults, match_on"),
        ({"timing": "recorded"}, "timing must be a Timing"),
        ({"faults": ["no-such-fault"]}, "no-such-fault"),
        ({"match_on": "colour"}, "valid matchers:"),
        ({"allow_repeats": "yes"}, "allow_repeats must be True or False"),
        ({"allow_secrets": "sk-abc"}, "allow_secrets= takes a list of str"),
        ({"redact": [1]}, "redact= takes a list of str"),
    ],
)
def test_a_bad_name_or_value_is_invalid_config_naming_what_is_valid(
    tmp_path: Path, keywords: dict[str, Any], message: str
) -> None:
    for build in (
        lambda: ReplayOptions(**keywords),
        lambda: ReplayAdapter(Cassette(), **keywords),
        lambda: use_cassette(tmp_path / "missing.msgpack", mode="once", **keywords),
    ):
        with pytest.raises(LlmError) as caught:
            build()
        assert caught.value.code is ErrorCode.INVALID_CONFIG
        assert message in caught.value.message


def test_of_applies_keywords_over_options_and_returns_them_as_is_without() -> None:
    base = ReplayOptions(timing=Timing.fixed(1.0, 0.5), faults=["http-429"])
    assert ReplayOptions.of(base) is base
    changed = ReplayOptions.of(base, allow_repeats=True)
    assert changed == dataclasses.replace(base, allow_repeats=True)
    assert ReplayOptions.of(None, allow_repeats=True) == ReplayOptions(allow_repeats=True)


async def test_every_face_passes_the_options_on_as_they_are(tmp_path: Path) -> None:
    path = _cassette(tmp_path)
    replay = ReplayOptions(allow_repeats=True)
    assert ReplayAdapter(path, replay_options=replay).replay_options is replay
    async with use_cassette(path, replay_options=replay) as session:
        assert session.replay_options is replay
        assert session.replayer is not None
        assert session.replayer.replay_options is replay
        for _ in range(2):  # allow_repeats reached the replayer
            assert await collect(session.stream(options())) == text_stream("hi")
    with ReplayServer(path, replay_options=replay) as server:
        assert server.playback.replay_options is replay


async def test_the_session_hands_the_redaction_settings_to_its_recorder(tmp_path: Path) -> None:
    session = use_cassette(
        tmp_path / "new.msgpack",
        live=lambda: PacedAdapter(paced(text_stream("x"))),
        mode="once",
        replay_options=ReplayOptions(redact=["private-literal"], allow_secrets=["sk-allowed-value-123456789"]),
    )
    async with session:
        await collect(session.stream(options("say private-literal")))
        recorder = session.recorder
        assert recorder is not None
        assert (recorder.redact, recorder.allow_secrets) == (("private-literal",), ("sk-allowed-value-123456789",))
    assert session.cassette.interactions[0].request.messages[0].content == "say [REDACTED]"


def test_a_server_replays_on_the_recorded_clock_unless_told_otherwise(tmp_path: Path) -> None:
    path = _cassette(tmp_path)
    with ReplayServer(path) as server:
        assert server.playback.replay_options.timing == Timing.recorded()
    with ReplayServer(path, timing=Timing.instant(), faults=["http-429"]) as server:
        assert server.playback.replay_options == ReplayOptions(faults=["http-429"])


def test_scenarios_keep_the_servers_matching_and_bring_their_own_timing_and_faults(tmp_path: Path) -> None:
    path = _cassette(tmp_path)
    scenario = Scenario(name="slow", cassette=str(path), faults=(HttpError(status=500),), timing=Timing.fixed(1, 2))
    with ReplayServer(scenarios=[scenario], match_on="model", allow_repeats=True, faults=["http-429"]) as server:
        replay = server.scenarios["slow"].playback.replay_options
    assert replay == ReplayOptions(
        timing=Timing.fixed(1, 2), faults=[HttpError(status=500)], match_on="model", allow_repeats=True
    )


# -- one Timing ---------------------------------------------------------------------------------------


def test_timing_is_written_mode_and_read_back() -> None:
    timing = Timing.recorded(2.0)
    assert msgspec.json.decode(msgspec.json.encode(timing))["mode"] == "recorded"
    assert msgspec.json.decode(b'{"mode": "fixed", "first_chunk_s": 1, "between_s": 0.5}', type=Timing) == (
        Timing.fixed(1.0, 0.5)
    )
    assert timing.kind == "recorded"
    with pytest.raises(msgspec.ValidationError, match=re.escape("at `$.speed`")):
        msgspec.json.decode(b'{"mode": "recorded", "speed": 0}', type=Timing)
    with pytest.raises(msgspec.ValidationError, match="kind"):
        msgspec.json.decode(b'{"kind": "recorded"}', type=Timing)


def test_a_scenario_file_timing_is_the_replay_timing() -> None:
    (scenario,) = parse_scenarios(
        {"scenarios": [{"name": "s", "cassette": "c.msgpack", "timing": {"mode": "recorded", "speed": 4.0}}]}
    )
    assert scenario.timing == Timing.recorded(4.0)
    assert type(scenario.timing) is Timing


async def test_get_scenarios_lists_timing_with_the_files_field_names(tmp_path: Path) -> None:
    path = _cassette(tmp_path)
    scenario = Scenario(name="paced", cassette=str(path), timing=Timing.fixed(0.5, 0.25))
    async with ReplayServer(scenarios=[scenario]) as server, httpx.AsyncClient() as client:
        listing = (await client.get(server.url + "/scenarios")).json()["scenarios"]
    assert listing[0]["timing"] == {"mode": "fixed", "speed": 1.0, "first_chunk_s": 0.5, "between_s": 0.25}
    assert msgspec.convert(listing[0]["timing"], Timing) == scenario.timing


# -- per call, no repeated work -----------------------------------------------------------------------


async def test_a_replayer_reads_the_environments_credentials_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment is read when the adapter is built, not once per call (documented: a snapshot)."""
    reads: list[int] = []
    real = redaction.env_secrets

    def counting(environ: typing.Mapping[str, str] | None = None) -> dict[str, str]:
        reads.append(1)
        return real(environ)

    monkeypatch.setattr(redaction, "env_secrets", counting)
    replay = ReplayAdapter(_cassette(tmp_path), allow_repeats=True)
    built = len(reads)
    for _ in range(3):
        assert await collect(replay.stream(options())) == text_stream("hi")
    assert len(reads) == built == 1
