"""pytest plugin (entry point ``pytest11: chunktape``): a cassette per test, record modes, a fault matrix.

The ``tape`` fixture is this test's adapter: it replays ``<test dir>/cassettes/<module>/<Class.test>.msgpack``
or records it through the ``tape_live_adapter`` fixture, per the record mode. Where a setting comes from,
first match wins:

- record mode: ``--tape-mode`` > ``@pytest.mark.tape(mode=...)`` > ``tape_config`` > ini ``tape_mode`` > ``none``
- replay settings (faults, timing, match_on, allow_repeats, allow_secrets, redact), ``virtual_time`` and ``max_age``:
  the marker > a ``tape_config`` fixture (override it per module or folder in ``conftest.py``) > the ini options
  (``tape_match_on``, ``tape_virtual_time``, ``tape_max_age``) > the defaults; they have no command-line flag
- cassette folder: a ``tape_dir`` fixture override > ``--tape-dir`` > ini ``tape_dir`` > next to the test file
- strict playback: ``--tape-strict`` > ini ``tape_strict`` > off

Upkeep (``_upkeep``): ``--tape-mode rewrite`` re-records, a cassette older than ``max_age`` fails in ``none`` and is
re-recorded in ``once``, the drift of each re-recorded cassette is printed, ``--tape-prune`` lists (or deletes) the
cassettes no collected test used, ``--tape-report`` writes the run's HTML report.

Saving happens at teardown, once the test's outcome is known (a sync fixture, so it works the same under
pytest-asyncio and anyio): a test that did not pass never replaces its cassette, its recording is kept beside
it as ``<name>.failed.msgpack``; so is a recording that still holds a credential, with every credential
replaced (``allow_secrets=[...]`` on the marker accepts a value that only looks like one). Workers of one run
(pytest-xdist) share its run id, so ``all`` replaces a shared cassette once and keeps the run's union.
``@pytest.mark.tape_fault_matrix`` runs a test once fault-free (``[no-fault]``,
which records when the mode says so) and once per fault, replaying that cassette with the fault injected.
HTTP code uses the same cassette: ``tape.transport()`` / ``tape.http_client()`` for an SDK's client, and
``tape_server_url`` (a replay server, or a recording proxy to ``tape_upstream``) for sync code and subprocesses.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn, TypedDict

import pytest

from chunktape._cassettes.codec import load_cassette
from chunktape._cassettes.matching import Matcher
from chunktape._cassettes.model import Cassette
from chunktape._errors import Advice, AdviceWords, ErrorCode, LlmError
from chunktape._protocol import LlmAdapter, WrappingAdapter
from chunktape._recorder import RUN_TAG
from chunktape._replayer.options import ReplayOptions
from chunktape._replayer.timing import Timing
from chunktape._report.drift import drift_summary
from chunktape._report.staleness import parse_age, stale
from chunktape._secrets import redact_text
from chunktape._session.modes import MISS_CODES, RecordMode
from chunktape._session.session import CassetteSession
from chunktape.faults import Fault
from chunktape.pytest._clock import loop_factory, virtual_time
from chunktape.pytest._matrix import (
    BASELINE_ID,
    BASELINE_SELECTED,
    MATRIX_SIGNATURE,
    BadMatrix,
    BaselineGate,
    MatrixRun,
    baseline_nodeid,
    mark_items,
    matrix_runs,
    note_baselines,
    wants_virtual_time,
)
from chunktape.pytest._missing import MissingCassettes
from chunktape.pytest._paths import cassette_file_name, checked_name, named_cassette, shown, test_name
from chunktape.pytest._upkeep import USES, Upkeep, partial_selection

__all__ = ["BASELINE_ID", "Tape", "TapeConfig"]


class Tape(CassetteSession):
    """What the ``tape`` fixture yields: the test's session (``CassetteSession``), with what only pytest knows of it.

    It is saved and closed at teardown, once the test's outcome is known (a test that did not pass never replaces
    its cassette), so ``aclose()`` and leaving ``async with tape`` do nothing here."""

    fault: Fault | None = None
    """The fault a ``tape_fault_matrix`` run injects (None outside the matrix and in its ``[no-fault]`` run)."""
    fault_id: str | None = None
    """That run's test id (``http-429``), or None."""

    async def aclose(self) -> None:
        """Nothing: the fixture saves and closes the session at teardown."""

    async def __aexit__(self, *exc_info: object) -> None:
        """Nothing: the fixture saves and closes the session at teardown."""


class TapeConfig(TypedDict, total=False):
    """What a ``tape_config`` fixture returns: defaults for the ``tape`` of every test it reaches (override it in a
    module or a ``conftest.py``), each key as ``@pytest.mark.tape`` takes it; the marker's own arguments win."""

    mode: str
    faults: Sequence[object]
    timing: Timing
    match_on: str | Sequence[str | Matcher]
    allow_repeats: bool
    allow_secrets: Sequence[str]
    redact: bool | Sequence[str]
    virtual_time: bool
    max_age: str | timedelta


LiveAdapter = LlmAdapter | Callable[[], LlmAdapter]
"""What a ``tape_live_adapter`` fixture returns: a factory (called only to record) or an adapter."""

_MODES = [mode.value for mode in RecordMode]
_REPLAY_ARGS = ("faults", "timing", "match_on", "allow_repeats", "allow_secrets", "redact")
"""The marker's arguments that are replay options (``ReplayOptions`` checks them)."""
_CONFIG_ARGS = ("mode", *_REPLAY_ARGS, "virtual_time", "max_age")
"""What ``tape_config`` may set: every argument of the marker but the cassette's name."""
_TAPE_ARGS = ("name", *_CONFIG_ARGS)
_PROPERTY = "chunktape"
_REAL_TIME = "chunktape-real-time"
_MISSING = "chunktape-missing"
"""A report's property: the missing cassette (``path``) this test reported first (``first: True``) or skipped for."""
"""A report's property: the async test wanted virtual time, and its run could not give it."""

_SECRET_ADVICE = "list its value in @pytest.mark.tape(allow_secrets=[...])"
_ADVICE: AdviceWords = {
    Advice.RECORD_OR_MATCH: "re-record with --tape-mode new_episodes, or relax @pytest.mark.tape(match_on=...)",
    Advice.RECORD_OR_REPEAT: "record the extra call with --tape-mode new_episodes, or let calls replay again with "
    "@pytest.mark.tape(allow_repeats=True)",
    Advice.UNPLAYED: "the test made fewer calls than were recorded; re-record with --tape-mode all to drop them",
    ErrorCode.CASSETTE_NOT_FOUND: "record it with --tape-mode once",
}
"""The next steps of a cassette miss in pytest's knobs: its options and the tape marker's arguments."""

_tape_key = pytest.StashKey[Tape]()
_clocked_key = pytest.StashKey[set[str]]()
"""The async tests (by their node id before parametrization) whose loop is chunktape's clock."""
_run_key = pytest.StashKey[str]()
_reports_key = pytest.StashKey[dict[str, pytest.TestReport]]()
_missing_key = pytest.StashKey[MissingCassettes]()
"""On the config: the run's missing cassettes (alone); on an item: the registry its ``tape`` used."""
_skipped_key = pytest.StashKey[bool]()
"""On an item skipped because its cassette is missing and another test reports it: its skip is shown at the test."""


# -- configuration --------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chunktape", "chunktape: record and replay LLM streams")
    group.addoption(
        "--tape-mode",
        dest="tape_mode",
        choices=_MODES,
        default=None,
        help="when the tape fixture records: none (replay only, the default: never calls a provider), "
        "once (record missing cassettes, and stale ones: tape_max_age), new_episodes (record and append requests "
        "without a match), all (re-record everything), rewrite (pytest-recording's name: re-record the cassettes of "
        "the tests that run, and remove those of passing tests that made no call). Overrides "
        "@pytest.mark.tape(mode=...) and the tape_mode ini.",
    )
    group.addoption(
        "--tape-dir",
        dest="tape_dir",
        default=None,
        metavar="DIR",
        help="root folder for cassettes (default: a cassettes/ folder next to each test file).",
    )
    group.addoption(
        "--tape-strict",
        dest="tape_strict",
        action="store_true",
        default=None,
        help="fail a test that leaves recorded interactions of its cassette unplayed.",
    )
    group.addoption(
        "--tape-prune",
        dest="tape_prune",
        nargs="?",
        const="list",
        choices=["list", "delete"],
        default=None,
        help="after the run, list the cassettes under the tape folders that no collected test used; "
        "--tape-prune=delete removes them, and refuses when the run was partial (-k, -m, selected files or node "
        "ids, --deselect, --lf, a collection error, a run that stopped early).",
    )
    group.addoption(
        "--tape-report",
        dest="tape_report",
        default=None,
        metavar="PATH",
        help="write one self-contained HTML report of the cassettes this run used (a timeline chart per "
        "interaction), as chunktape report does.",
    )
    parser.addini(
        "tape_max_age",
        "the oldest a cassette may be (30d, 12h, 2w): an older one fails its test (none), or is re-recorded "
        "(once, new_episodes); @pytest.mark.tape(max_age=...) and tape_config win",
        default="",
    )
    parser.addini("tape_mode", f"default record mode of the tape fixture: {', '.join(_MODES)}", default="")
    parser.addini("tape_dir", "root folder for cassettes, relative to the ini file", default="")
    parser.addini(
        "tape_match_on",
        "the request matchers of every tape, comma-separated (default: model,messages,tools,params); "
        "@pytest.mark.tape(match_on=...) wins",
        default="",
    )
    parser.addini("tape_strict", "fail tests that leave recorded interactions unplayed", type="bool", default=False)
    parser.addini(
        "tape_virtual_time",
        "run fault-matrix runs and replays with recorded timing or time faults in virtual time "
        "(needs pytest-asyncio >= 1.4)",
        type="bool",
        default=True,
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tape(name=None, mode=None, faults=(), timing=None, match_on=None, allow_repeats=False, allow_secrets=(), "
        "virtual_time=None, max_age=None): the tape fixture's cassette: its file name, record mode (--tape-mode "
        "wins), faults injected on replay, replay Timing, request matchers, whether played interactions may play "
        "again, values that may stay in the cassette although they look like credentials, "
        "whether fault runs and timed replays run in virtual time (default: the tape_virtual_time ini), and the "
        "oldest the cassette may be (30d; default: the tape_max_age ini).",
    )
    config.addinivalue_line(
        "markers",
        f"{MATRIX_SIGNATURE}: run the test fault-free ([no-fault], which records) and once per fault "
        "([http-429], ...), replaying the test's cassette with the fault (a transient one once, a permanent one on "
        "every call; calls= targets other call numbers), exposed as tape.fault, in virtual time.",
    )
    config.addinivalue_line(
        "markers",
        "tape_fault_search(max_examples=200, faults=STANDARD_FAULTS, max_faults=2, seed=0, deadline_s=600, "
        "timing=Timing.recorded(), database='default'): run the async test on tape, then under hypothesis-drawn fault "
        "schedules in virtual time; a failure is shrunk and printed as a @pytest.mark.tape(faults=[...]) line.",
    )
    ini_mode = str(config.getini("tape_mode"))
    if ini_mode and ini_mode not in _MODES:
        raise pytest.UsageError(f"ini option tape_mode = {ini_mode!r} is not a record mode; valid: {', '.join(_MODES)}")
    ini_match_on = _ini_match_on(config)
    if ini_match_on is not None:
        try:
            ReplayOptions(match_on=ini_match_on)
        except LlmError as error:
            raise pytest.UsageError(f"ini option tape_match_on = {ini_match_on!r}: {error.message}") from None
    ini_age = str(config.getini("tape_max_age")).strip()
    if ini_age:
        try:
            parse_age(ini_age, "tape_max_age")
        except LlmError as error:
            raise pytest.UsageError(f"ini option {error.message}") from None
    if config.getoption("tape_prune") == "delete":
        why = partial_selection(config)
        if why is not None:
            raise pytest.UsageError(
                f"--tape-prune=delete refuses a partial run ({why}): a cassette of a test left out would look unused; "
                "run the whole suite, or list them with --tape-prune"
            )
    config.pluginmanager.register(_Summary(config), "chunktape-summary")
    if getattr(config, "workerinput", None) is None:  # the controller (or a run without pytest-xdist) prunes
        config.pluginmanager.register(Upkeep(config), "chunktape-upkeep")
    # One id for the whole run, shared by the pytest-xdist workers: --tape-mode all replaces a shared cassette
    # once per run and adds every later writer's recording to it.
    workerinput = getattr(config, "workerinput", None)
    run = workerinput.get("testrunuid") if isinstance(workerinput, dict) else None
    config.stash[_run_key] = str(run) if run else uuid.uuid4().hex


def _record_mode(config: pytest.Config, chosen: object, where: str = "@pytest.mark.tape") -> RecordMode:
    """Command line > ``chosen`` (the marker's, else ``tape_config``'s; ``where`` names it) > ini > ``none``."""
    cli = config.getoption("tape_mode")
    if cli is not None:
        return RecordMode(cli)
    if chosen is not None:
        if not isinstance(chosen, str):
            pytest.fail(f"{where}: mode= must be one of {', '.join(_MODES)}", pytrace=False)
        try:
            return RecordMode.parse(chosen)
        except LlmError as error:
            raise pytest.fail.Exception(redact_text(f"{where}: mode=: {error.message}"), pytrace=False) from None
    ini = str(config.getini("tape_mode"))
    return RecordMode(ini) if ini else RecordMode.NONE


def _ini_match_on(config: pytest.Config) -> str | None:
    value = str(config.getini("tape_match_on")).strip()
    return value or None


def _strict(config: pytest.Config) -> bool:
    cli = config.getoption("tape_strict")
    return bool(cli) if cli is not None else bool(config.getini("tape_strict"))


def _root_dir(config: pytest.Config) -> Path | None:
    cli = config.getoption("tape_dir")
    if cli:
        return config.invocation_params.dir / str(cli)
    ini = str(config.getini("tape_dir"))
    if ini:
        base = config.inipath.parent if config.inipath is not None else config.rootpath
        return base / ini
    return None


# -- the fault matrix -----------------------------------------------------------------------------


@pytest.hookimpl(trylast=True)  # after @pytest.mark.parametrize, so the fault id comes last: test[x-http-429]
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("tape_fault_matrix")
    if marker is None:
        return
    if "tape" not in metafunc.fixturenames:
        where = metafunc.definition.nodeid
        pytest.fail(f"{where}: @pytest.mark.tape_fault_matrix needs the test to use the tape fixture", pytrace=False)
    try:
        runs = matrix_runs(marker)
    except LlmError as error:
        # One failing item for this test, rather than a collection error that hides the rest of the module.
        metafunc.parametrize("_tape_fault", [BadMatrix(error.message)], ids=["invalid-fault-matrix"], indirect=True)
        return
    metafunc.parametrize("_tape_fault", [None, *runs], ids=[BASELINE_ID, *(run.ident for run in runs)], indirect=True)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's loadgroup reads the xdist_group markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_items(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    note_baselines(session.items)  # after -k, -m and --deselect: a deselected [no-fault] run records nothing


@pytest.hookimpl(optionalhook=True, trylast=True)
def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio (1.4 or later) asks which loop an async test runs on: a ``tape`` test gets chunktape's
    clock, which its ``tape`` fixture turns virtual if the test's settings want it; every other test the usual
    loop. A conftest's own answer comes first and wins; so does a test's own ``looptime`` marker."""
    if "tape" in getattr(item, "fixturenames", ()) and item.get_closest_marker("looptime") is None:
        config.stash.setdefault(_clocked_key, set()).add(item.nodeid)
        return {"chunktape": loop_factory}
    return {"asyncio": asyncio.new_event_loop}


@pytest.fixture
def _tape_fault(request: pytest.FixtureRequest) -> MatrixRun | None:
    """The fault the matrix injects into this run (None outside the matrix and in its ``[no-fault]`` run)."""
    param: MatrixRun | BadMatrix | None = getattr(request, "param", None)
    if isinstance(param, BadMatrix):
        pytest.fail(redact_text(f"@pytest.mark.tape_fault_matrix: {param.problem}"), pytrace=False)
    return param


# -- the fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def tape_live_adapter() -> LiveAdapter:
    """Override in conftest.py to return a factory of your real adapter (or an adapter); used only to record."""

    def missing() -> LlmAdapter:
        pytest.fail(
            "chunktape: recording needs a live adapter, and none is configured. Define a fixture in conftest.py:\n\n"
            "    @pytest.fixture\n"
            "    def tape_live_adapter():\n"
            "        return lambda: MyProviderAdapter(api_key=os.environ['MY_API_KEY'])\n\n"
            "It is called only when a cassette is recorded (--tape-mode once/new_episodes/all).",
            pytrace=False,
        )

    return missing


@pytest.fixture
def tape_dir(request: pytest.FixtureRequest) -> Path:
    """The folder of this module's cassettes: ``<test dir>/cassettes/<module>``, or under ``--tape-dir``.

    Override it (in a module, class or conftest.py) to keep cassettes somewhere else.
    """
    return default_tape_dir(request.config, request.path)


def default_tape_dir(config: pytest.Config, test_file: Path) -> Path:
    """The ``tape_dir`` fixture's folder for a test file when no one overrides it."""
    root = _root_dir(config)
    if root is None:
        return test_file.parent / "cassettes" / test_file.stem
    try:
        relative = test_file.parent.relative_to(config.rootpath)
    except ValueError:
        relative = Path()
    return root / relative / test_file.stem


def tape_root(config: pytest.Config, test_file: Path) -> Path:
    """The folder ``--tape-prune`` searches for a test file's cassettes: ``--tape-dir`` (or the ini's), else the
    ``cassettes`` folder beside the test file."""
    root = _root_dir(config)
    return root if root is not None else test_file.parent / "cassettes"


def _marker_kwargs(item: pytest.Item) -> dict[str, Any]:
    marker = item.get_closest_marker("tape")
    if marker is None:
        return {}
    if marker.args:
        pytest.fail("@pytest.mark.tape takes keyword arguments only: " + ", ".join(_TAPE_ARGS), pytrace=False)
    unknown = sorted(set(marker.kwargs) - set(_TAPE_ARGS))
    if unknown:
        pytest.fail(f"@pytest.mark.tape: unknown {unknown}; valid: {', '.join(_TAPE_ARGS)}", pytrace=False)
    return dict(marker.kwargs)


def _live(value: LiveAdapter) -> Callable[[], LlmAdapter]:
    if isinstance(value, LlmAdapter):
        # The user's fixture owns the adapter: the session closes what the factory built, and a wrapper never
        # closes its inner adapter.
        return lambda: WrappingAdapter(value)
    if callable(value):
        return value
    pytest.fail(
        redact_text(f"tape_live_adapter must return an LlmAdapter or a factory of one, got {value!r}"), pytrace=False
    )


@pytest.fixture
def tape_config() -> TapeConfig:
    """Override in a test module or a ``conftest.py`` to set defaults for every ``tape`` below it (``TapeConfig``:
    mode, faults, timing, match_on, allow_repeats, allow_secrets, redact, virtual_time, max_age); a test's
    ``@pytest.mark.tape(...)`` arguments win over it, and it wins over the ini options."""
    return {}


def _settings(item: pytest.Item, config: TapeConfig) -> dict[str, Any]:
    """The test's ``tape`` settings: the marker's arguments over ``tape_config``'s (each checked for its keys)."""
    marker = _marker_kwargs(item)
    if not isinstance(config, Mapping):
        pytest.fail(f"tape_config must return a dict (TapeConfig), got {type(config).__name__}", pytrace=False)
    unknown = sorted(set(config) - set(_CONFIG_ARGS))
    if unknown:
        pytest.fail(f"tape_config: unknown {unknown}; valid: {', '.join(_CONFIG_ARGS)}", pytrace=False)
    return {**config, **{key: value for key, value in marker.items() if value is not None}}


@pytest.fixture
def tape(
    request: pytest.FixtureRequest,
    tape_dir: Path,
    tape_live_adapter: LiveAdapter,
    tape_config: TapeConfig,
    _tape_fault: MatrixRun | None,
) -> Iterator[Tape]:
    """This test's adapter: replays its cassette, or records it per the record mode; saved at teardown.

    ``tape.tools(real_tools)`` is the ``ToolRunner`` for an agent run on it: records the tools' executions, or
    answers from them without calling a tool (``verify=True``: runs them and reports divergences)."""
    item = request.node
    assert isinstance(item, pytest.Item)
    settings = _settings(item, tape_config)
    marker = _marker_kwargs(item)
    chosen_mode = marker.get("mode")
    mode = _record_mode(
        request.config,
        tape_config.get("mode") if chosen_mode is None else chosen_mode,
        "@pytest.mark.tape" if chosen_mode is not None else "tape_config",
    )
    in_matrix = item.get_closest_marker("tape_fault_matrix") is not None
    matrix_id = None
    if _tape_fault is not None:
        matrix_id = _tape_fault.ident  # the id the test was parametrized with, which names may override
    elif in_matrix:
        matrix_id = BASELINE_ID
    replay_settings = {key: settings[key] for key in _REPLAY_ARGS if settings.get(key) is not None}
    ini_match_on = _ini_match_on(request.config)
    if ini_match_on is not None:
        replay_settings.setdefault("match_on", ini_match_on)
    named = marker.get("name") is not None
    try:
        name = checked_name(marker["name"]) if named else test_name(item, matrix_id)
        replay = ReplayOptions(**replay_settings)
    except LlmError as error:
        where = "tape_config" if tape_config and not set(marker) & set(_TAPE_ARGS) else "@pytest.mark.tape"
        raise pytest.fail.Exception(redact_text(f"{where}: {error.message}"), pytrace=False) from None
    path = named_cassette(tape_dir, name) if named else tape_dir / cassette_file_name(name)
    predicted = default_tape_dir(request.config, item.path) / cassette_file_name(name)
    root = tape_root(request.config, item.path) if tape_dir == predicted.parent else tape_dir
    use = {"path": str(path.resolve()), "root": str(root.resolve()), "ran": True, "overridden": root == tape_dir}
    item.user_properties.append((USES, use))
    previous, stale_reason = None, None
    max_age = settings.get("max_age") or str(request.config.getini("tape_max_age")).strip() or None
    if max_age is not None and path.exists():
        where = "the tape_max_age ini option"
        if marker.get("max_age") is not None:
            where = "@pytest.mark.tape"
        elif tape_config.get("max_age") is not None:
            where = "tape_config"
        try:
            oldest = parse_age(max_age, f"{where}: max_age")
        except LlmError as error:
            raise pytest.fail.Exception(redact_text(error.message), pytrace=False) from None
        previous = _readable(path)
        old = None if previous is None else stale(previous, oldest, "")
        if old is not None and mode in (RecordMode.ONCE, RecordMode.NEW_EPISODES):
            mode, stale_reason = RecordMode.ALL, f"stale: {old.message}"  # a failed test keeps the old one
        elif old is not None and mode is RecordMode.NONE:
            pytest.fail(
                f"[CASSETTE_STALE] {shown(request.config, path)} was {old.message} ({where}); re-record it: "
                f"pytest '{item.nodeid}' --tape-mode rewrite",
                pytrace=False,
            )
    if mode.replaces and _tape_fault is None and previous is None and path.exists():
        previous = _readable(path)  # what the re-recording replaces: its drift is printed after the run
    gate = _baseline_gate(request)
    missing = item.stash[_missing_key] = _missing_cassettes(request)
    if _tape_fault is not None:
        baseline_selected = item.stash.get(BASELINE_SELECTED, False)
        if gate is not None and baseline_selected and _records(mode, path):
            gate.wait(path)  # the [no-fault] run on another worker records the cassette this run replays
        # A recording made under an injected fault would record the fault, not the provider: replay only.
        mode = RecordMode.NONE
        replay = ReplayOptions.of(replay, faults=(*replay.faults, _tape_fault.injected))
        if not path.exists():
            baseline = baseline_nodeid(item.nodeid, _tape_fault.ident)
            if baseline_selected:  # that run is in this session: it is the one that says how to record it
                _skip_missing(item, path, f"{shown(request.config, path)} does not exist; {baseline} records it")
            _missing_cassette(
                item,
                path,
                f"[CASSETTE_NOT_FOUND] the fault matrix replays {shown(request.config, path)}, which does not exist "
                f"yet; its fault-free run records it: pytest '{baseline}' --tape-mode once",
            )
    elif mode is RecordMode.NONE and not path.exists():
        first = missing.first(path)
        if first is not None:  # an earlier test failed for want of this cassette and said how to record it
            _skip_missing(item, path, f"{shown(request.config, path)} does not exist; see {first}")
    try:
        session = Tape(
            path,
            live=None if mode is RecordMode.NONE else _live(tape_live_adapter),
            mode=mode,
            replay_options=replay,
            run_id=request.config.stash[_run_key],
        )
    except LlmError as error:  # an unreadable cassette: the message says what to do
        raise pytest.fail.Exception(redact_text(f"{shown(request.config, path)}: {error}"), pytrace=False) from None
    if _tape_fault is not None:
        session.fault, session.fault_id = _tape_fault.fault, _tape_fault.ident
    item.stash[_tape_key] = session
    if gate is not None and _tape_fault is None and matrix_id == BASELINE_ID:
        # Finalizers run last in, first out: this one after the teardown below saved; its fault runs may go.
        request.addfinalizer(lambda: gate.done(path))  # noqa: PT021 - after the save below, even a failed one
    with contextlib.ExitStack() as clock:
        flag = settings.get("virtual_time")
        if flag is None:
            flag = bool(request.config.getini("tape_virtual_time"))
        if flag and wants_virtual_time(in_matrix=in_matrix, faults=replay.faults, timing=replay.timing):
            session.virtual_time = True  # a sync client's replayed bodies too
            if item.nodeid.split("[", 1)[0] in request.config.stash.get(_clocked_key, set()):
                clock.enter_context(virtual_time())
            elif inspect.iscoroutinefunction(getattr(item, "obj", None)):
                item.user_properties.append((_REAL_TIME, True))
        yield session
        reports = item.stash.get(_reports_key, {})
        call = reports.get("call")
        passed = call is not None and call.passed and not hasattr(call, "wasxfail")
        try:
            written = session.close(failed=not passed, secret_advice=_SECRET_ADVICE)
        except LlmError as error:  # a secret left in the recording: kept aside, redacted
            if session.written is not None:
                recorded = sum(1 for made in session.calls if made.recorded)
                kept = {"path": shown(request.config, session.written), "interactions": recorded, "failed": True}
                item.user_properties.append((_PROPERTY, kept))
            raise pytest.fail.Exception(redact_text(f"{shown(request.config, path)}: {error}"), pytrace=False) from None
        if written is not None:
            recorded = sum(1 for made in session.calls if made.recorded)
            total = len(session.cassette.interactions) if passed else recorded
            wrote: dict[str, Any] = {
                "path": shown(request.config, written),
                "interactions": total,
                "failed": not passed,
            }
            if passed and previous is not None and written == path:
                wrote["drift"] = drift_summary(previous, session.cassette).sentence()
                wrote["why"] = stale_reason or f"--tape-mode {session.mode.value}"
            item.user_properties.append((_PROPERTY, wrote))
        elif passed and mode is RecordMode.REWRITE and previous is not None and path.exists():
            _remove_unused(request.config, item, path)


def _predicted_use(item: pytest.Item) -> dict[str, Any]:
    """The cassette a test that never reached its ``tape`` fixture (skipped, or an error before it) would use,
    where ``tape_dir`` is not overridden: ``--tape-prune`` must not count it as unused."""
    marker = item.get_closest_marker("tape")
    name = marker.kwargs.get("name") if marker is not None else None
    callspec = getattr(item, "callspec", None)
    run = callspec.params.get("_tape_fault") if callspec is not None else None
    matrix_id = run.ident if isinstance(run, MatrixRun) else None
    if matrix_id is None and item.get_closest_marker("tape_fault_matrix") is not None:
        matrix_id = BASELINE_ID
    folder = default_tape_dir(item.config, item.path)
    try:
        if name is not None:
            path = named_cassette(folder, checked_name(name))
        else:
            path = folder / cassette_file_name(test_name(item, matrix_id))
    except LlmError:
        path = folder
    return {"path": str(path.resolve()), "root": str(tape_root(item.config, item.path).resolve()), "ran": False}


def _readable(path: Path) -> Cassette | None:
    """The cassette at ``path``, or None when it cannot be read (the session then reports why)."""
    try:
        return load_cassette(path)
    except LlmError:
        return None


def _remove_unused(config: pytest.Config, item: pytest.Item, path: Path) -> None:
    """``--tape-mode rewrite``: a passing test that made no call leaves no cassette, unless another test of this
    run wrote it (a shared ``name=``) or it cannot be read (left for a person to look at)."""
    current = _readable(path)
    if current is None or current.meta.tags.get(RUN_TAG) == config.stash[_run_key]:
        return
    path.unlink(missing_ok=True)
    item.user_properties.append((_PROPERTY, {"path": shown(config, path), "removed": True, "failed": False}))


@pytest.fixture
def tape_upstream() -> str:
    """Override in conftest.py to return the provider's base URL (``https://api.deepseek.com``); used only to
    record through ``tape_server_url``, whose proxy forwards to it."""
    pytest.fail(
        "chunktape: recording through tape_server_url needs the provider's URL. Define a fixture in conftest.py:\n\n"
        "    @pytest.fixture\n"
        "    def tape_upstream():\n"
        "        return 'https://api.deepseek.com'\n",
        pytrace=False,
    )


@pytest.fixture
def tape_server_url(tape: Tape, request: pytest.FixtureRequest) -> Iterator[str]:
    """This test's cassette over HTTP on 127.0.0.1, for sync code and agents in a subprocess or another language
    (an OpenAI client wants ``tape_server_url + "/v1"``): a ``ReplayServer`` with the test's replay options (its
    faults, the fault matrix's, its timing) when the test replays; a recording proxy to ``tape_upstream`` when it
    records. Either shares the cassette, mode, strict check and teardown save with ``tape``."""
    from chunktape.http import ReplayServer  # the server stack only for the tests that ask for it
    from chunktape.http._server.proxy import RecordingProxy

    if tape.recording:
        upstream = request.getfixturevalue("tape_upstream")
        with RecordingProxy(upstream, transport=tape.transport(kind="httpx2", sync=False)) as proxy:
            yield proxy.url
        return
    if tape.replayer is None:
        item = request.node
        assert isinstance(item, pytest.Item)
        _missing_cassette(item, tape.path, _not_found(item, tape))
    with ReplayServer(tape.path, replay_options=tape.replay_options) as server:
        tape.attach_http(playback=server.playback)
        yield server.url


def _records(mode: RecordMode, path: Path) -> bool:
    """Whether a ``[no-fault]`` run in ``mode`` writes ``path`` (so its fault runs wait for it)."""
    return mode is not RecordMode.NONE and (mode is not RecordMode.ONCE or not path.exists())


def _run_folder(request: pytest.FixtureRequest) -> Path | None:
    """Under pytest-xdist, a folder every worker of the run shares; None when the run has one process."""
    if getattr(request.config, "workerinput", None) is None:
        return None
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    return factory.getbasetemp().parent / f"chunktape-{request.config.stash[_run_key]}"


def _baseline_gate(request: pytest.FixtureRequest) -> BaselineGate | None:
    """Under pytest-xdist, the gate between a fault matrix's runs, in a folder every worker of the run shares."""
    folder = _run_folder(request)
    return None if folder is None else BaselineGate(folder)


def _missing_cassettes(request: pytest.FixtureRequest) -> MissingCassettes:
    """The run's missing cassettes: shared through the run's folder under pytest-xdist, else kept in the config."""
    folder = _run_folder(request)
    if folder is not None:
        return MissingCassettes(folder)
    return request.config.stash.setdefault(_missing_key, MissingCassettes())


def _not_found(item: pytest.Item, session: CassetteSession) -> str:
    """A missing cassette, as the first test that needs it reports it: where, and the command that records it."""
    return (
        f"[CASSETTE_NOT_FOUND] no cassette at {shown(item.config, session.path)} (record mode {session.mode.value!r} "
        f"only replays); record it with: pytest '{item.nodeid}' --tape-mode once"
    )


def _skip_missing(item: pytest.Item, path: Path, reason: str) -> NoReturn:
    """Skip a test whose cassette is missing while another test of the run reports it (one error per cassette)."""
    item.stash[_skipped_key] = True
    item.user_properties.append((_MISSING, {"path": shown(item.config, path), "first": False}))
    pytest.skip(f"chunktape: {reason}")


def _missing_cassette(item: pytest.Item, path: Path, message: str) -> NoReturn:
    """At setup, a cassette this test replays does not exist: fail with ``message`` if the test is the first of the
    run to need it, else skip naming the first."""
    first = item.stash[_missing_key].claim(path, item.nodeid)
    if first != item.nodeid:
        _skip_missing(item, path, f"{shown(item.config, path)} does not exist; see {first}")
    item.user_properties.append((_MISSING, {"path": shown(item.config, path), "first": True}))
    pytest.fail(message, pytrace=False)


# -- outcomes and reports -------------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """``@pytest.mark.tape_fault_search``: the fault search runs the test body (``chunktape.pytest._marker_search``)."""
    if pyfuncitem.get_closest_marker("tape_fault_search") is None:
        return None
    from chunktape.pytest._search import run_fault_search  # imports hypothesis: only when a test asks for it

    run_fault_search(pyfuncitem)
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """``--tape-strict``: a test that passed but left recorded interactions unplayed fails, listing them."""
    result = yield
    session = item.stash.get(_tape_key, None)
    if session is not None and session.fault is None and _strict(item.config):
        try:
            session.assert_all_played(advice=_ADVICE[Advice.UNPLAYED])
        except AssertionError as error:
            raise pytest.fail.Exception(redact_text(f"--tape-strict: {error}"), pytrace=False) from None
    return result


def _cassette_error(error: BaseException | None) -> LlmError | None:
    """The cassette miss behind a failure, also when the code under test wrapped it in its own exception."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, LlmError) and error.code in MISS_CODES:
            return error
        error = error.__cause__ or error.__context__
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember each phase's report (teardown saves by outcome); shorten cassette misses to their message; list the
    tool divergences a ``tape.tools(..., verify=True)`` run found."""
    uses_tape = "tape" in getattr(item, "fixturenames", ())
    if call.when == "teardown" and uses_tape and not any(name == USES for name, _ in item.user_properties):
        item.user_properties.append((USES, _predicted_use(item)))
    report = yield
    item.stash.setdefault(_reports_key, {})[report.when] = report
    if report.skipped and item.stash.get(_skipped_key, False):
        # Shown at the test, as a skip marker's is: the skips of one matrix fold into one line of the summary.
        path, line = item.reportinfo()[:2]
        reason = str(call.excinfo.value) if call.excinfo is not None else ""
        report.longrepr = (str(path), (line or 0) + 1, reason)
    session = item.stash.get(_tape_key, None)
    if session is not None and report.when == "call" and session.tool_divergences:
        listed = "\n".join(str(divergence) for divergence in session.tool_divergences)
        report.sections.append(("chunktape: real tools diverged from the recording", listed))
    if session is None or report.when != "call" or not report.failed:
        return report
    error = _cassette_error(call.excinfo.value if call.excinfo is not None else None)
    miss = error if error is not None else session.miss
    if miss is not None and miss.code is ErrorCode.CASSETTE_NOT_FOUND:
        # The test cannot have meant anything without its cassette: that is its failure, caught or not.
        first = item.stash[_missing_key].claim(session.path, item.nodeid)
        report.user_properties.append(
            (_MISSING, {"path": shown(item.config, session.path), "first": first == item.nodeid})
        )
        if first == item.nodeid:
            text = _not_found(item, session)
        else:
            text = f"[CASSETTE_NOT_FOUND] no cassette at {shown(item.config, session.path)}; see {first}"
        if error is None and call.excinfo is not None:
            own = call.excinfo.exconly().splitlines()[0]
            text += f"\n(the code under test caught it; the test then failed: {own})"
        report.longrepr = redact_text(f"{item.nodeid}: {text}")
    elif error is not None:
        report.longrepr = redact_text(f"{item.nodeid}: {error.render(_ADVICE)}")
    elif session.miss is not None:
        caught = session.miss.render(_ADVICE)
        report.sections.append(("chunktape", f"the cassette reported (and the test caught): {caught}"))
    return report


class _Summary:
    """Collects the cassettes written (from teardown reports, so pytest-xdist workers' count too) and prints them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.written: dict[str, int] = {}
        self.failed: dict[str, tuple[int, str]] = {}
        self.real_time: set[str] = set()
        self.drift: dict[str, tuple[str, str]] = {}
        """Each re-recorded cassette: what changed, and why it was re-recorded."""
        self.removed: set[str] = set()
        self.missing: dict[str, list[str]] = {}
        """Each missing cassette: the test that reported it first (if one did), then the others that needed it."""
        self.missing_skipped: dict[str, int] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            for name, value in report.user_properties:
                if name == _MISSING and isinstance(value, dict):
                    self._missed(report, value)
            return
        for name, value in report.user_properties:
            if name == _REAL_TIME:
                self.real_time.add(report.nodeid)
            if name == _PROPERTY and isinstance(value, dict):
                if value.get("removed"):
                    self.removed.add(value["path"])
                    continue
                if "drift" in value:
                    self.drift[value["path"]] = (value["drift"], value["why"])
                if value["failed"]:
                    self.failed[value["path"]] = (value["interactions"], report.nodeid)
                else:  # writers of a shared cassette report what it held after their save: the last holds most
                    self.written[value["path"]] = max(value["interactions"], self.written.get(value["path"], 0))

    def _missed(self, report: pytest.TestReport, value: dict[str, Any]) -> None:
        path = str(value["path"])
        if value.get("first") and report.nodeid not in self.missing.get(path, []):
            self.missing.setdefault(path, []).insert(0, report.nodeid)
        elif not value.get("first") and report.skipped:
            self.missing.setdefault(path, [])
            self.missing_skipped[path] = self.missing_skipped.get(path, 0) + 1

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.written and not self.failed and not self.real_time and not self.removed and not self.missing:
            return
        terminalreporter.write_sep("-", "chunktape")
        if self.missing:
            skipped = sum(self.missing_skipped.values())
            terminalreporter.write_line(
                f"chunktape: {len(self.missing)} cassette(s) missing; the first test that needs each says how to "
                f"record it"
                + (
                    f", and the {skipped} other test(s) that replay them were skipped (-rs lists them)"
                    if skipped
                    else ""
                )
                + ":"
            )
            for path in sorted(self.missing):
                firsts = self.missing[path]
                count = self.missing_skipped.get(path, 0)
                who = firsts[0] if firsts else "a test of another run"
                terminalreporter.write_line(f"  {path}: {who}" + (f" ({count} skipped)" if count else ""))
        if self.real_time:
            terminalreporter.write_line(
                f"chunktape: {len(self.real_time)} async test(s) wanted virtual time and waited in real time: it "
                "needs pytest-asyncio >= 1.4 (pip install 'chunktape[pytest]')"
            )
        if self.written:
            total = sum(self.written.values())
            terminalreporter.write_line(f"chunktape: wrote {len(self.written)} cassette(s), {total} interaction(s):")
            for path, count in sorted(self.written.items()):
                terminalreporter.write_line(f"  {path} ({count} interaction(s))")
        if self.drift:
            terminalreporter.write_line(f"chunktape: re-recorded {len(self.drift)} cassette(s); what changed:")
            for path, (drift, why) in sorted(self.drift.items()):
                terminalreporter.write_line(f"  {path} ({why}): {drift}")
        if self.removed:
            terminalreporter.write_line(
                f"chunktape: removed {len(self.removed)} cassette(s) whose passing test made no call (--tape-mode "
                "rewrite):"
            )
            for path in sorted(self.removed):
                terminalreporter.write_line(f"  {path}")
        if self.failed:
            terminalreporter.write_line(
                f"chunktape: {len(self.failed)} test(s) did not pass while recording; their cassettes were left "
                "as they were and the recordings kept beside them:"
            )
            for path, (count, nodeid) in sorted(self.failed.items()):
                terminalreporter.write_line(f"  {path} ({count} interaction(s)) from {nodeid}")
