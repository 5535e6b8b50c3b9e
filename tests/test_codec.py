"""Cassette files: both encodings, atomic saves, the lock, lazy loading, the journal, and bad files."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunktape import (
    FORMAT_VERSION,
    Cancelled,
    Cassette,
    CassetteMeta,
    Completed,
    ErrorCode,
    Event,
    Interaction,
    LlmError,
    Raised,
    RecordedRequest,
    TextDelta,
    load_cassette,
    open_cassette,
    recover,
    save_cassette,
)
from chunktape._cassettes.codec import MIGRATIONS, encode_cassette
from chunktape._cassettes.journal import CrashedJournalWarning, Journal, journal_path
from chunktape._cassettes.store import append_interactions
from chunktape._replayer import ReplayAdapter
from helpers import interaction_of, options, text_stream, tool_stream

ENCODINGS = ["c.msgpack", "c.json"]


def make_cassette(count: int = 3) -> Cassette:
    interactions = []
    for number in range(count):
        chunks = (
            text_stream(f"hello {number}", " world") if number % 2 == 0 else tool_stream("f", '{"a":', f"{number}}}")
        )
        raised = Raised(t_ns=5, code="PROVIDER_HTTP_ERROR", message="slow down", status=429, retry_after=1.5)
        interactions.append(
            interaction_of(chunks, raised if number == 1 else None, content=f"q{number}", temperature=0.5)
        )
    return Cassette(meta=CassetteMeta(adapter="test", tags={"suite": "codec"}), interactions=interactions)


@pytest.mark.parametrize("name", ENCODINGS)
def test_round_trip_is_lossless(tmp_path: Path, name: str) -> None:
    cassette = make_cassette()
    save_cassette(cassette, tmp_path / name)
    assert load_cassette(tmp_path / name) == cassette
    assert open_cassette(tmp_path / name).to_cassette() == cassette


def test_json_and_msgpack_convert_losslessly(tmp_path: Path) -> None:
    cassette = make_cassette()
    save_cassette(cassette, tmp_path / "a.json")
    save_cassette(load_cassette(tmp_path / "a.json"), tmp_path / "b.msgpack")
    save_cassette(load_cassette(tmp_path / "b.msgpack"), tmp_path / "c.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "c.json").read_bytes()


def test_json_is_pretty_and_uses_protocol_wire_names(tmp_path: Path) -> None:
    save_cassette(make_cassette(), tmp_path / "c.json")
    text = (tmp_path / "c.json").read_text()
    assert f'\n  "version": {FORMAT_VERSION},' in text
    assert '"blockType": "text"' in text
    assert '"retryAfter": 1.5' in text


def test_fingerprint_is_sha256_of_sorted_canonical_json() -> None:
    import hashlib

    request = RecordedRequest.from_options(options("x", temperature=0.2))
    canonical = msgspec.json.encode(msgspec.structs.replace(request, fingerprint=""), order="sorted")
    assert request.fingerprint == hashlib.sha256(canonical).hexdigest()
    assert RecordedRequest.from_options(options("y")).fingerprint != request.fingerprint


def test_a_recorded_request_keeps_every_field_of_the_options_as_copies() -> None:
    """``request_fields`` names the fields one by one: a field added to the requests must be added there too."""
    from chunktape._protocol import RequestFields

    live = options("x", temperature=0.2)
    fields = live.request_fields()
    assert list(fields) == list(RequestFields.__struct_fields__)
    assert fields["messages"] == live.messages
    assert fields["messages"] is not live.messages
    assert fields["extra"] is not live.extra
    assert fields["tools"] is not live.tools


@pytest.mark.parametrize("name", ENCODINGS)
def test_save_leaves_no_temp_file(tmp_path: Path, name: str) -> None:
    save_cassette(make_cassette(), tmp_path / name)
    save_cassette(make_cassette(1), tmp_path / name)
    assert sorted(os.listdir(tmp_path)) == [name]


def test_failed_save_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.msgpack"
    save_cassette(make_cassette(1), path)
    before = path.read_bytes()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(LlmError, match="disk full") as caught:
        save_cassette(make_cassette(3), path)
    assert caught.value.code is ErrorCode.CASSETTE_UNWRITABLE
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["c.msgpack"]


def test_concurrent_appends_keep_every_interaction(tmp_path: Path) -> None:
    path = tmp_path / "shared.msgpack"
    one = make_cassette(1).interactions

    def writer() -> None:
        for _ in range(5):
            append_interactions(path, one, CassetteMeta())

    threads = [threading.Thread(target=writer) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(load_cassette(path).interactions) == 30
    assert os.listdir(tmp_path) == ["shared.msgpack"]


@pytest.mark.parametrize("name", ENCODINGS)
def test_open_decodes_events_only_when_an_interaction_is_used(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    good = make_cassette(2)
    save_cassette(good, path)
    document = (
        msgspec.json.decode(path.read_bytes()) if name.endswith(".json") else msgspec.msgpack.decode(path.read_bytes())
    )
    bad_events = [{"tNs": "not a number"}]
    if name.endswith(".json"):
        document["interactions"][1]["events"] = bad_events
        path.write_bytes(msgspec.json.encode(document))
    else:  # msgpack holds each interaction's events as one nested blob
        document["interactions"][1]["events"] = msgspec.msgpack.encode(bad_events)
        path.write_bytes(msgspec.msgpack.encode(document))

    lazy = open_cassette(path)
    assert len(lazy) == 2
    assert list(lazy.requests) == [interaction.request for interaction in good.interactions]
    assert lazy.interaction(0) == good.interactions[0]
    with pytest.raises(LlmError) as caught:
        lazy.interaction(1)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    assert str(path) in str(caught.value)
    assert "interaction #1" in str(caught.value)


def test_missing_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(LlmError) as caught:
        load_cassette(tmp_path / "nope.msgpack")
    assert caught.value.code is ErrorCode.CASSETTE_NOT_FOUND
    assert str(caught.value).startswith(f"[CASSETTE_NOT_FOUND] {tmp_path / 'nope.msgpack'} does not exist")


# -- bad files -----------------------------------------------------------------------------------


def _load_everything(path: Path) -> None:
    load_cassette(path)
    lazy = open_cassette(path)
    for index in range(len(lazy)):
        lazy.interaction(index)


def _expect_code(path: Path, *codes: ErrorCode) -> LlmError:
    with pytest.raises(LlmError) as caught:
        _load_everything(path)
    assert caught.value.code in codes
    assert str(path) in str(caught.value)
    return caught.value


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300), suffix=st.sampled_from([".msgpack", ".json"]))
def test_random_bytes_raise_corrupt_or_version(tmp_path: Path, data: bytes, suffix: str) -> None:
    path = tmp_path / f"random{suffix}"
    path.write_bytes(data)
    assert _error_code(path) in (None, ErrorCode.CASSETTE_CORRUPT, ErrorCode.CASSETTE_VERSION)


def _error_code(path: Path) -> ErrorCode | None:
    try:
        _load_everything(path)
    except LlmError as error:
        return error.code
    return None


@pytest.mark.parametrize("name", ENCODINGS)
def test_truncated_files_are_corrupt(tmp_path: Path, name: str) -> None:
    source = tmp_path / f"full-{name}"
    save_cassette(make_cassette(3), source)
    data = source.read_bytes()
    path = tmp_path / name
    for offset in range(0, len(data) - 2, 10):
        path.write_bytes(data[:offset])
        _expect_code(path, ErrorCode.CASSETTE_CORRUPT)


@pytest.mark.parametrize(
    "document",
    [
        [],
        "cassette",
        None,
        {},
        {"version": "one"},
        {"version": 1, "interactions": 5},
        {"version": 1, "interactions": [{"request": {}}]},
        {"version": 1, "interactions": [{"request": {"model": "m", "messages": []}, "events": [], "outcome": {}}]},
        {"version": 1, "meta": {"createdAt": "yesterday"}, "interactions": []},
        {"version": 1, "interactions": [], "meta": []},
    ],
)
def test_valid_json_of_the_wrong_shape_is_corrupt(tmp_path: Path, document: Any) -> None:
    path = tmp_path / "wrong.json"
    path.write_bytes(msgspec.json.encode(document))
    _expect_code(path, ErrorCode.CASSETTE_CORRUPT)


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_future_version_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    document = msgspec.to_builtins(make_cassette(1))
    document["version"] = FORMAT_VERSION + 1
    document["interactions"][0]["newField"] = {"anything": True}
    path.write_bytes(msgspec.json.encode(document) if name.endswith(".json") else msgspec.msgpack.encode(document))
    error = _expect_code(path, ErrorCode.CASSETTE_VERSION)
    assert f"version {FORMAT_VERSION + 1}" in str(error)


def test_older_versions_are_migrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cassette = make_cassette(2)
    document = msgspec.to_builtins(cassette)
    document["version"] = 0
    for interaction in document["interactions"]:  # pretend version 0 called events "chunks"
        interaction["chunks"] = interaction.pop("events")
    path = tmp_path / "old.json"
    path.write_bytes(msgspec.json.encode(document))

    with pytest.raises(LlmError) as caught:
        load_cassette(path)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    assert "no migration" in str(caught.value)

    def v0_to_v1(old: dict[str, Any]) -> dict[str, Any]:
        for interaction in old["interactions"]:
            interaction["events"] = interaction.pop("chunks")
        return old

    monkeypatch.setitem(MIGRATIONS, 0, v0_to_v1)
    assert load_cassette(path) == cassette
    assert open_cassette(path).to_cassette() == cassette


@pytest.mark.parametrize("writer", ["save", "append"])
@pytest.mark.parametrize("problem", ["parent is a file", "path is a folder", "no permission"])
# "no permission" uses /sys, which refuses new files even to root (CI runs as root).
def test_an_unwritable_cassette_path_is_cassette_unwritable(tmp_path: Path, writer: str, problem: str) -> None:
    if problem == "parent is a file":
        (tmp_path / "afile").write_text("x")
        path = tmp_path / "afile" / "c.msgpack"
    elif problem == "path is a folder":
        path = tmp_path / "c.msgpack"
        path.mkdir()
    else:
        path = Path("/sys") / f"chunktape-{tmp_path.name}.msgpack"
    cassette = make_cassette(1)
    with pytest.raises(LlmError) as caught:
        if writer == "save":
            save_cassette(cassette, path)
        else:
            append_interactions(path, cassette.interactions, cassette.meta)
    assert caught.value.code is ErrorCode.CASSETTE_UNWRITABLE
    assert str(path) in str(caught.value)
    assert isinstance(caught.value.cause, OSError)
    assert str(caught.value.cause.strerror) in str(caught.value)
    leftovers = [name for _, _, files in os.walk(tmp_path) for name in files if name.endswith(".tmp")]
    assert leftovers == []  # the temp file is cleaned up


# -- the journal ---------------------------------------------------------------------------------


def test_recover_rebuilds_finished_and_cut_short_interactions(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    chunks = text_stream("a", "b")
    journal = Journal(journal_path(path), CassetteMeta(adapter="j"))
    first = RecordedRequest.from_options(options("one"))
    second = RecordedRequest.from_options(options("two"))
    journal.begin(0, first, None, 1)
    journal.begin(1, second, None, 1)
    for position, chunk in enumerate(chunks):
        journal.event(0, position, chunk)
        if position < 3:
            journal.event(1, position * 10, chunk)
    journal.end(0, Completed(t_ns=99))
    journal.close(remove=False)
    # a torn final write, as a SIGKILL mid-write would leave
    with open(journal_path(path), "ab") as file:
        file.write(b'["event",1,40,{"type":"text-')

    cassette = recover(journal_path(path))
    assert cassette.meta.adapter == "j"
    done, cut = cassette.interactions
    assert done.request == first
    assert [e.chunk for e in done.events] == chunks
    assert done.outcome == Completed(t_ns=99)
    assert cut.request == second
    assert [e.chunk for e in cut.events] == chunks[:3]
    assert isinstance(cut.outcome, Cancelled)
    assert cut.outcome.t_ns == 20


def test_a_crashed_numbered_journal_is_moved_aside_not_truncated(tmp_path: Path) -> None:
    path = journal_path(tmp_path / "c.msgpack")
    live = Journal(path, CassetteMeta(adapter="live"))  # holds c.msgpack.journal
    crashed = Journal(path, CassetteMeta(adapter="crashed"))
    assert crashed.path == path.with_name("c.msgpack.journal.1")
    crashed.begin(0, RecordedRequest.from_options(options("kept")), None, 1)
    crashed.close(remove=False)
    before = crashed.path.read_bytes()

    with pytest.warns(CrashedJournalWarning, match=r"c\.msgpack\.journal\.1\.crashed-"):
        fresh = Journal(path, CassetteMeta(adapter="fresh"))
    assert fresh.path == crashed.path
    (aside,) = tmp_path.glob("c.msgpack.journal.1.crashed-*")
    assert aside.read_bytes() == before
    assert recover(aside).interactions[0].request.messages[0].content == "kept"
    fresh.close(remove=True)
    live.close(remove=True)
    assert sorted(os.listdir(tmp_path)) == [aside.name]


def test_a_journal_is_deleted_while_its_lock_is_still_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    path = journal_path(tmp_path / "c.msgpack")
    journal = Journal(path, CassetteMeta())
    real_unlink = os.unlink
    seen: list[bool] = []

    def unlink(target: Any, *args: Any, **kwargs: Any) -> None:
        if Path(target) == path:  # a new recorder trying to claim the journal at this instant must fail to
            fd = os.open(path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append(False)
            except BlockingIOError:
                seen.append(True)
            finally:
                os.close(fd)
        real_unlink(target, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    journal.close(remove=True)
    assert seen == [True]
    assert not path.exists()


def test_claiming_a_journal_deleted_between_open_and_lock_opens_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bad interleaving: the new recorder opens the old journal, its owner deletes it and lets go, then the
    new recorder gets the lock -- on a deleted file, whose events would be lost."""
    import fcntl

    path = journal_path(tmp_path / "c.msgpack")
    old = Journal(path, CassetteMeta(adapter="old"))
    real_flock = fcntl.flock
    calls: list[int] = []

    def flock(fd: int, operation: int) -> None:
        calls.append(fd)
        if len(calls) == 1:  # between the new recorder's open and its lock, the old one saves and leaves
            old.close(remove=True)
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    new = Journal(path, CassetteMeta(adapter="new"))
    monkeypatch.undo()
    assert len(calls) == 2  # it noticed, and opened (and locked) the file again
    assert new.path == path
    new.begin(0, RecordedRequest.from_options(options("kept")), None, 1)
    new.close(remove=False)
    assert recover(path).meta.adapter == "new"
    assert recover(path).interactions[0].request.messages[0].content == "kept"


def test_a_journal_is_private_to_its_owner(tmp_path: Path) -> None:
    """It holds the stream before redaction: no other user may read it, whatever the umask."""
    path = journal_path(tmp_path / "c.msgpack")
    journal = Journal(path, CassetteMeta())
    assert path.stat().st_mode & 0o777 == 0o600
    journal.close(remove=False)
    assert path.stat().st_mode & 0o777 == 0o600

    left_empty = journal_path(tmp_path / "d.msgpack")
    left_empty.touch(mode=0o644)
    left_empty.chmod(0o644)
    Journal(left_empty, CassetteMeta()).close(remove=False)
    assert left_empty.stat().st_mode & 0o777 == 0o600


def test_recover_reports_a_damaged_journal(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack.journal"
    path.write_bytes(b'["meta",{}]\nnot json\n["begin",0,{"model":"m","messages":[]},null,1]\n')
    with pytest.raises(LlmError) as caught:
        recover(path)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    assert "line 2" in str(caught.value)


_texts = st.text(st.characters(codec="utf-8"), max_size=12)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(_texts, min_size=1, max_size=8), times=st.lists(st.integers(0, 2**62), min_size=1))
def test_any_text_round_trips_through_both_encodings(tmp_path: Path, pieces: list[str], times: list[int]) -> None:
    chunks = text_stream(*pieces)
    events = [Event(t_ns=times[n % len(times)], chunk=chunk) for n, chunk in enumerate(chunks)]
    cassette = Cassette(
        interactions=[
            Interaction(
                request=RecordedRequest.from_options(options("".join(pieces))),
                events=events,
                outcome=Raised(t_ns=1, code="TIMEOUT", message="".join(reversed(pieces))),
            )
        ]
    )
    for name in ENCODINGS:
        (tmp_path / name).write_bytes(encode_cassette(cassette, name))  # save_cassette's bytes, not its fsyncs
        assert load_cassette(tmp_path / name) == cassette
        assert open_cassette(tmp_path / name).interaction(0) == cassette.interactions[0]


def test_a_journal_larger_than_its_mapped_window_recovers_whole(tmp_path: Path) -> None:
    path = journal_path(tmp_path / "big.msgpack")
    journal = Journal(path, CassetteMeta())
    journal.begin(0, RecordedRequest.from_options(options()), None, 1)
    chunks = [TextDelta(index=0, text=f"piece {n} " * 5) for n in range(40_000)]  # about 4 MiB of records
    for position, chunk in enumerate(chunks):
        journal.event(0, position, chunk)
    journal.close(remove=False)
    assert b"\x00" not in path.read_bytes()  # trimmed to what was written
    (interaction,) = recover(path).interactions
    assert interaction.chunks == chunks


_APPENDER = """
import sys
from chunktape import CassetteMeta, load_cassette
from chunktape._cassettes.store import append_interactions
source = load_cassette(sys.argv[1])
for _ in range(10):
    append_interactions(sys.argv[2], source.interactions, CassetteMeta())
"""


def test_processes_appending_to_one_cassette_keep_every_interaction(tmp_path: Path) -> None:
    import subprocess
    import sys

    source = tmp_path / "one.msgpack"
    save_cassette(make_cassette(1), source)
    target = tmp_path / "shared" / "c.json"
    processes = [subprocess.Popen([sys.executable, "-c", _APPENDER, str(source), str(target)]) for _ in range(4)]
    assert [process.wait(timeout=60) for process in processes] == [0, 0, 0, 0]
    assert len(load_cassette(target).interactions) == 40
    assert os.listdir(target.parent) == ["c.json"]


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_cassette_with_only_a_version_is_empty_for_both_readers(tmp_path: Path, name: str) -> None:
    """Found by fuzzing: ``load_cassette`` refused a msgpack file that ``open_cassette`` accepted."""
    path = tmp_path / name
    document = {"version": FORMAT_VERSION}
    path.write_bytes(msgspec.json.encode(document) if name.endswith(".json") else msgspec.msgpack.encode(document))
    assert load_cassette(path).interactions == []
    assert open_cassette(path).to_cassette().interactions == []


@pytest.mark.parametrize("suffix", [".msgpack", ".json"])
def test_opening_decodes_requests_only_as_far_as_matching_needs(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"c{suffix}"
    cassette = make_cassette(3)
    save_cassette(cassette, path)
    assert list(ReplayAdapter(path).source.requests) == [item.request for item in cassette.interactions]
    # Spoil the later requests (their message becomes a number, same length in msgpack): matching the first
    # request decodes only that one, so it never notices; reading them all does.
    data = path.read_bytes()
    for number in (1, 2):
        good, bad = (
            (b'"q%d"' % number, b"%d" % number) if suffix == ".json" else (b"\xa2q%d" % number, b"\xcd\x00%c" % number)
        )
        assert data.count(good) == 1
        data = data.replace(good, bad)
    path.write_bytes(data)
    replay = ReplayAdapter(path)
    assert replay.select(cassette.interactions[0].request) == 0
    with pytest.raises(LlmError, match="interaction #1 request") as caught:
        list(replay.source.requests)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT


def test_a_corrupt_later_request_is_cassette_corrupt_when_reached(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    cassette = make_cassette(2)
    save_cassette(cassette, path)
    text = path.read_text()
    assert text.count('"content": "q1"') == 1  # the second request's message
    path.write_text(text.replace('"content": "q1"', '"content": 42'))
    replay = ReplayAdapter(path)
    assert replay.select(cassette.interactions[0].request) == 0  # the good part still replays
    with pytest.raises(LlmError) as caught:
        list(replay.source.requests)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    assert "interaction #1 request" in str(caught.value)
    with pytest.raises(LlmError) as caught:
        load_cassette(path)  # a full load (chunktape check) still refuses the file at once
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT


def test_a_directory_given_as_a_cassette_says_so(tmp_path: Path) -> None:
    for read in (load_cassette, open_cassette):
        with pytest.raises(LlmError, match="is a directory, not a cassette file") as caught:
            read(tmp_path)
        assert caught.value.code is ErrorCode.CASSETTE_NOT_FOUND
