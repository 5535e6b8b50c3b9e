"""The example cassettes shipped in cassettes/ load, validate, replay, and are reproducible."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import msgspec
import pytest

from chunktape import (
    Cancelled,
    Cassette,
    Completed,
    ErrorCode,
    Raised,
    ReplayAdapter,
    StreamValidator,
    load_cassette,
    validate,
)
from helpers import collect_until_error

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "cassettes"
NAMES = ["demo-session", "retry-429", "cut-mid-tool-call"]


def _check(cassette: Cassette) -> None:
    for interaction in cassette.interactions:
        match interaction.outcome:
            case Completed():
                validate(interaction.chunks)
            case Raised() | Cancelled():
                validator = StreamValidator(require_finish=False)
                for chunk in interaction.chunks:
                    validator.feed(chunk)


@pytest.mark.parametrize("name", NAMES)
def test_examples_load_and_validate_in_both_encodings(name: str) -> None:
    from_json = load_cassette(EXAMPLES / f"{name}.json")
    assert load_cassette(EXAMPLES / f"{name}.msgpack") == from_json
    assert from_json.interactions
    _check(from_json)


def test_the_examples_show_what_they_promise() -> None:
    demo = load_cassette(EXAMPLES / "demo-session.msgpack").interactions
    assert len(demo) == 3
    assert [item.request.messages[-1].role for item in demo] == ["user", "tool", "tool"]
    assert all(type(item.outcome) is Completed for item in demo)

    failed, succeeded = load_cassette(EXAMPLES / "retry-429.msgpack").interactions
    assert isinstance(failed.outcome, Raised)
    assert (failed.outcome.status, failed.outcome.retry_after) == (429, 2.0)
    assert (failed.attempt, succeeded.attempt) == (1, 2)
    assert failed.request == succeeded.request

    (cut,) = load_cassette(EXAMPLES / "cut-mid-tool-call.msgpack").interactions
    assert isinstance(cut.outcome, Cancelled)
    assert type(cut.chunks[-1]).__name__ == "ToolCallDelta"


async def test_the_cut_example_replays_then_runs_out() -> None:
    replay = ReplayAdapter(EXAMPLES / "cut-mid-tool-call.json")
    request = replay.source.requests[0].to_options()
    chunks, error = await collect_until_error(replay.stream(request))
    assert len(chunks) == len(replay.source.interaction(0).events)
    assert error.code is ErrorCode.CASSETTE_EXHAUSTED


def test_the_generator_script_reproduces_the_examples(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_examples", ROOT / "scripts" / "make_example_cassettes.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build(tmp_path)
    for name in NAMES:
        for suffix in (".json", ".msgpack"):
            fresh, shipped = load_cassette(tmp_path / f"{name}{suffix}"), load_cassette(EXAMPLES / f"{name}{suffix}")
            same_version = msgspec.structs.replace(fresh.meta, recorder=shipped.meta.recorder)
            assert msgspec.structs.replace(fresh, meta=same_version) == shipped
