"""The public face: one sorted ``__all__`` per public module, holding what users import."""

from __future__ import annotations

import chunktape
import chunktape.cassettes
import chunktape.recorder
import chunktape.replayer

CASSETTE_API = {
    "Cancelled",
    "Cassette",
    "CassetteMeta",
    "CassetteSession",
    "Completed",
    "DEFAULT_MATCH",
    "Event",
    "FORMAT_VERSION",
    "Interaction",
    "Raised",
    "RecordMode",
    "RecordedRequest",
    "RecordingAdapter",
    "ReplayAdapter",
    "StreamViolationWarning",
    "Timing",
    "load_cassette",
    "recover",
    "redact",
    "save_cassette",
    "use_cassette",
}


def test_every_all_is_one_sorted_list_of_real_names() -> None:
    for module in (chunktape, chunktape.cassettes, chunktape.recorder, chunktape.replayer):
        assert module.__all__ == sorted(module.__all__), module.__name__
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_the_cassette_api_is_exported_from_the_top() -> None:
    assert set(chunktape.__all__) >= CASSETTE_API
