"""Fault search: hypothesis draws fault schedules over an agent's recorded calls and shrinks one that breaks it.

A *schedule* is a short list of faults, each ``Targeted(calls=[n], fault=...)`` at one ``stream()`` call of the
replay. Calls are numbered as ``Targeted`` counts them, over every call the adapter sees, retries included, so a
schedule selects exactly the calls it names and means the same whether a fault fires once (transient) or on every
call it selects (permanent).

``search_faults(agent, cassette)`` runs ``agent`` once fault-free (to count its calls), then under up to
``max_examples`` drawn schedules: which call, which fault of the catalogue, at which chunk, with which parameters
(a stall that outlasts the deadline, a 429 without its Retry-After). Each run replays the cassette with
``Timing.recorded()`` on its own virtual-time event loop, so a 30 s stall or a 60 s Retry-After costs no wall time, and
an agent still running after ``deadline_s`` virtual seconds has hung: a failure (``TIMEOUT``). Any exception the
agent raises is a failure; hypothesis then shrinks the schedule to the smallest that still fails. The search is
deterministic for a seed, and a failure found is saved in hypothesis's example database and tried first next time.

The result prints as a ready-to-paste ``@pytest.mark.tape(faults=[...])`` line and as a scenario-file entry.
The search needs hypothesis (``pip install 'chunktape[search]'``).

``@pytest.mark.tape_fault_search`` is its pytest face (``run_fault_search``): the plugin hands a marked test here
instead of calling it. Its async body runs once on the ``tape`` fixture, in virtual time (which records the
cassette when the record mode says so), then once per drawn fault schedule with ``tape`` replaced by a replaying
adapter over that cassette (the ``@pytest.mark.tape`` faults, matchers and allowed secrets still apply). A failing
schedule fails the test with the shrunk schedule as a ``@pytest.mark.tape(faults=[...])`` line and a scenario
entry. Other fixtures are shared by every run, as under hypothesis's ``@given``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import math
import os
import random
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias, get_args

import msgspec
import pytest

try:
    import hypothesis
    from hypothesis import strategies as st
    from hypothesis.database import ExampleDatabase
    from hypothesis.errors import NoSuchExample
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError("chunktape's fault search needs hypothesis: pip install 'chunktape[search]'") from missing

from chunktape._cassettes.codec import LazyCassette, as_lazy
from chunktape._cassettes.model import Cassette
from chunktape._errors import ErrorCode, LlmError
from chunktape._httpx import HTTP_ERRORS, HttpKind
from chunktape._protocol import GenerateOptions, LlmAdapter, ReasoningOption, StreamChunk
from chunktape._replayer.options import ReplayOptions
from chunktape._replayer.playback import Playback
from chunktape._replayer.timing import Timing
from chunktape._session.session import CassetteSession
from chunktape._session.transport import client_for
from chunktape._virtual_time import replay_loop
from chunktape.faults._specs import (
    STANDARD_FAULTS,
    Disconnect,
    Fault,
    HttpError,
    Stall,
    StreamError,
    StreamFault,
    Targeted,
    Truncate,
    parse_faults,
)
from chunktape.harness._tools import Tool, ToolRunner
from chunktape.harness._tooltape import ReplayingToolRunner, ToolTape
from chunktape.http import ReplayTransport
from chunktape.http._server.app import replay_server_for
from chunktape.pytest._paths import shown

__all__ = [
    "DEFAULT_DEADLINE_S",
    "MARKER",
    "Agent",
    "AgentHang",
    "Schedule",
    "SearchResult",
    "run_fault_search",
    "run_virtual",
    "search_faults",
]

Agent: TypeAlias = Callable[[LlmAdapter], Awaitable[object]]
"""What the search runs: an async check of the agent over the adapter it is given; raising means it failed."""

FaultCatalogue: TypeAlias = Mapping[str, Fault] | Iterable[Fault | str | Mapping[str, Any]]
Database: TypeAlias = ExampleDatabase | Literal["default"] | None

DEFAULT_DEADLINE_S = 600.0
"""Loop seconds after which a run counts as a hang."""

_TAGS: dict[str, str] = {str(cls.__struct_config__.tag): cls.__name__ for cls in get_args(Fault)}
_STREAM_FAULTS = get_args(StreamFault)


# -- running the agent in virtual time -----------------------------------------------------------


class AgentHang(LlmError):
    """A run still going after the search's deadline (``TIMEOUT``): the agent waits for good on something."""

    def __init__(self, deadline_s: float) -> None:
        super().__init__(
            f"the agent did not finish within {deadline_s:g} virtual seconds: it hangs (is an idle timeout missing?)",
            ErrorCode.TIMEOUT,
            hint="the search ends a run at deadline_s seconds of loop time",
        )
        self.deadline_s = deadline_s


def run_virtual(agent: Agent, adapter: LlmAdapter, deadline_s: float) -> BaseException | None:
    """Run ``agent(adapter)`` on a fresh virtual-time loop; return what it raised (a hang: ``TIMEOUT``), or None.

    Every sleep and timeout passes at once in loop time; a run still going after ``deadline_s`` loop seconds
    is stopped and reported as a hang.
    """
    if isinstance(deadline_s, bool) or not isinstance(deadline_s, int | float) or not 0 < deadline_s < math.inf:
        raise LlmError(
            f"fault search: deadline_s must be a finite number of seconds > 0, got {deadline_s!r}",
            ErrorCode.INVALID_CONFIG,
        )

    async def main() -> None:
        scope = asyncio.timeout(deadline_s)
        try:
            async with scope:
                await agent(adapter)
        except TimeoutError:
            if scope.expired():
                raise AgentHang(deadline_s) from None
            raise

    loop = replay_loop(end=2 * deadline_s + 1)  # end= backs the timeout up should the agent swallow its cancellation
    try:
        with asyncio.Runner(loop_factory=lambda: loop) as runner:
            runner.run(main())
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # pytest.fail and friends are BaseExceptions too
        return AgentHang(deadline_s) if loop.deadline_reached else error
    return None


class _Replay(LlmAdapter):
    """What one run hands the agent in place of ``tape``: every face of it over one replay engine (``Playback``), so
    a schedule's call numbers count the agent's calls whichever face makes them.

    The adapter (``stream()``, as ``ReplayAdapter`` streams it), ``transport()`` and ``http_client()`` (an SDK's
    client, sync or async, httpx2 or httpx, answered in process by ``ReplayTransport``), ``fault`` (None: a schedule
    is no single fault), ``calls``, ``injected`` and ``playback``; the pytest face also gives ``tape_server_url`` a
    replay server over the same engine.
    """

    fault = None
    fault_id = None

    def __init__(self, playback: Playback) -> None:
        self.playback = playback

    @property
    def name(self) -> str:
        return self.playback.recorded_name

    @property
    def calls(self) -> int:
        return self.playback.calls

    @property
    def injected(self) -> list[str | None]:
        return list(self.playback.injected)

    @property
    def replay_options(self) -> ReplayOptions:
        return self.playback.replay_options

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        return self.playback.source.meta.reasoning_options

    def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        return self.playback.open(options).chunks

    def transport(self, *, kind: HttpKind = "httpx2", sync: bool = False) -> ReplayTransport:
        """A transport for an SDK's client (either library, sync or async) on this run's engine; a sync client's
        waits run on a virtual clock, as the run does."""
        return ReplayTransport.over(self.playback, virtual_time=True)

    def http_client(self, *, kind: HttpKind = "httpx2", sync: bool = False, **client: Any) -> Any:
        """An httpx2 or httpx client (``sync``: ``Client``) on ``transport()``; ``client``: its own keywords."""
        return client_for(self.transport(kind=kind, sync=sync), kind=kind, sync=sync, **client)

    def tools(self, tools: Mapping[str, Tool] | None = None, *, verify: bool = False) -> ToolRunner:
        """The recorded tool runs answered again, as ``tape.tools()`` replays them (no tool is called; ``verify``
        is for the fault-free run, which ``tape`` itself makes)."""
        timing = self.playback.replay_options.timing
        scale = 1e-9 / timing.speed if timing.kind == "recorded" else 0
        recorded = ToolTape(self.playback.source.tool_runs, self.playback.where)
        return ReplayingToolRunner(recorded, None, time_scale=scale)


# -- schedules -----------------------------------------------------------------------------------


def _python(value: Any) -> str:
    """``value`` (from ``msgspec.to_builtins``) as Python source; tagged dicts become fault constructors."""
    if isinstance(value, dict):
        tag = value.get("type")
        if isinstance(tag, str) and tag in _TAGS:
            fields = _fields(value)
            return f"{_TAGS[tag]}({', '.join(f'{key}={_python(item)}' for key, item in fields.items())})"
        return "{" + ", ".join(f"{_python(key)}: {_python(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_python(item) for item in value) + "]"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid Python literal
    return repr(value)


def _is_fault(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") in _TAGS


def _fields(fault: dict[str, Any]) -> dict[str, Any]:
    """A fault's fields but ``type``, in reading order: where it fires, then what fires, then its name
    (``Targeted(calls=[2], fault=...)``)."""
    fields = {key: item for key, item in fault.items() if key not in ("type", "id") and not _is_fault(item)}
    fields |= {key: item for key, item in fault.items() if _is_fault(item)}
    if "id" in fault:
        fields["id"] = fault["id"]
    return fields


def _toml(value: Any) -> str:
    """``value`` (from ``msgspec.to_builtins``) as a TOML inline value: what scenario files hold."""
    if isinstance(value, dict):
        items = {"type": value["type"], **_fields(value)} if _is_fault(value) else value
        return "{ " + ", ".join(f"{key} = {_toml(item)}" for key, item in items.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON's escapes are TOML's basic-string escapes
    return repr(value)


def _timing_python(timing: Timing) -> str:
    if timing.kind == "recorded":
        return "Timing.recorded()" if timing.speed == 1.0 else f"Timing.recorded(speed={timing.speed!r})"
    return f"Timing.fixed(first_chunk_s={timing.first_chunk_s!r}, between_s={timing.between_s!r})"


def _timing_toml(timing: Timing) -> dict[str, Any]:
    if timing.kind == "recorded":
        return {"mode": "recorded"} if timing.speed == 1.0 else {"mode": "recorded", "speed": timing.speed}
    return {"mode": "fixed", "first_chunk_s": timing.first_chunk_s, "between_s": timing.between_s}


@dataclass(frozen=True)
class Schedule:
    """Faults for one replay, each targeted at one call; prints as a pytest marker or a scenario entry."""

    faults: tuple[Targeted, ...]
    timing: Timing = field(default_factory=Timing.recorded)
    """The replay timing the schedule was found with (part of the reproduction)."""

    def __len__(self) -> int:
        return len(self.faults)

    def imports(self) -> str:
        """The import lines the ``marker()`` line needs."""
        names = sorted({_TAGS[tag] for fault in self.faults for tag in _tags(msgspec.to_builtins(fault))})
        lines = [f"from chunktape.faults import {', '.join(names)}"] if names else []
        if not self.timing.is_instant:
            lines.append("from chunktape import Timing")
        return "\n".join(lines)

    def marker(self) -> str:
        """``@pytest.mark.tape(faults=[...])`` that replays this schedule (the faults' reprs round-trip)."""
        faults = ", ".join(_python(msgspec.to_builtins(fault)) for fault in self.faults)
        timing = "" if self.timing.is_instant else f", timing={_timing_python(self.timing)}"
        return f"@pytest.mark.tape(faults=[{faults}]{timing})"

    def scenario(self, name: str, cassette: str) -> str:
        """A ``[[scenarios]]`` entry of a TOML scenario file (``chunktape serve --scenarios``) for this schedule."""
        lines = ["[[scenarios]]", f"name = {_toml(name)}", f"cassette = {_toml(cassette)}"]
        if not self.timing.is_instant:
            lines.append(f"timing = {_toml(_timing_toml(self.timing))}")
        lines.append(f"faults = {_toml([msgspec.to_builtins(fault) for fault in self.faults])}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.marker()


def _tags(value: Any) -> Iterable[str]:
    if isinstance(value, dict):
        tag = value.get("type")
        if isinstance(tag, str) and tag in _TAGS:
            yield tag
        for item in value.values():
            yield from _tags(item)
    elif isinstance(value, list):
        for item in value:
            yield from _tags(item)


@dataclass(frozen=True)
class SearchResult:
    """What a fault search found: the smallest failing schedule (None: every example passed), and counts."""

    failure: Schedule | None
    """The shrunk schedule that breaks the agent; empty when the agent fails even without a fault."""
    error: BaseException | None
    """What the agent raised under ``failure`` (``AgentHang``, a ``TIMEOUT``, for a hang)."""
    examples: int
    """Schedules run, shrinking included (the fault-free run not counted)."""
    examples_to_find: int | None
    """Schedules run up to and including the first failing one (1 when the database replayed a saved failure)."""
    calls: int
    """The ``stream()`` calls the agent made fault-free."""
    seed: int
    deadline_s: float

    @property
    def hang(self) -> bool:
        """Whether the failure is a hang (the run passed ``deadline_s`` virtual seconds)."""
        return isinstance(self.error, AgentHang)

    def report(self, *, name: str = "fault-search", cassette: str = "CASSETTE") -> str:
        """The failure for people: the error, then the marker line and the scenario entry that reproduce it."""
        if self.failure is None:
            return f"no failing fault schedule in {self.examples} examples (seed {self.seed})"
        error = f"{type(self.error).__name__}: {self.error}"
        if self.error is not None and tool_failed(self.error):
            return (
                "chunktape's fault search failed here, not the agent (a bug of chunktape's: please report it with "
                f"this message):\n    {error}"
            )
        if not self.failure.faults:
            return f"the agent fails without any fault:\n    {error}"
        found = (
            f"found after {self.examples_to_find} example(s), {self.examples} in all with shrinking; seed {self.seed}"
        )
        lines = [
            f"the agent fails under this {len(self.failure)}-fault schedule ({found}):",
            f"    {error}",
            "Reproduce it in a test:",
            *(f"    {line}" for line in self.failure.imports().splitlines()),
        ]
        if self.hang:
            lines.append(f"    # a hang: run the agent under asyncio.timeout({self.deadline_s:g}) (virtual seconds)")
        lines += [
            f"    {self.failure.marker()}",
            "or as a scenario (chunktape serve --scenarios FILE):",
            *(f"    {line}" for line in self.failure.scenario(name, cassette).splitlines()),
        ]
        return "\n".join(lines)


_PACKAGE = Path(__file__).resolve().parent.parent
"""chunktape's own source folder."""


def tool_failed(error: BaseException) -> bool:
    """Whether ``error`` is the search's own failure rather than the agent's: an exception raised inside
    chunktape's code (other than the ``LlmError`` and HTTP errors a replay raises on purpose), or a face of ``tape``
    the stand-in lacks (an ``AttributeError`` on it)."""
    if isinstance(error, (LlmError, OSError, *HTTP_ERRORS)):
        return False  # what a replay raises on purpose: a cassette's error, a broken or late HTTP body
    if isinstance(error, AttributeError) and isinstance(getattr(error, "obj", None), _Replay):
        return True
    if not isinstance(error, Exception):
        return False
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and Path(frame.tb_frame.f_code.co_filename).resolve().is_relative_to(_PACKAGE)


# -- the search space ----------------------------------------------------------------------------


def _catalogue(faults: FaultCatalogue) -> tuple[StreamFault, ...]:
    """The stream faults the search draws from; selectors are refused (the search targets calls itself)."""
    items = list(faults.values()) if isinstance(faults, Mapping) else faults
    parsed = parse_faults(items)
    if not parsed:
        raise LlmError("fault search: faults= lists no fault to draw from", ErrorCode.INVALID_CONFIG)
    catalogue: list[StreamFault] = []
    for position, fault in enumerate(parsed):
        if not isinstance(fault, _STREAM_FAULTS):
            raise LlmError(
                f"fault search: faults[{position}] is a {type(fault).__name__}; give stream faults (HttpError, "
                "StreamError, Disconnect, Stall, Latency, Truncate, Corrupt): the search chooses the calls itself",
                ErrorCode.INVALID_CONFIG,
            )
        catalogue.append(fault)
    return tuple(catalogue)


def _vary(template: StreamFault, changes: dict[str, Any]) -> StreamFault:
    """``template`` with ``changes``; a changed fault loses the template's id (its derived id says what it is)."""
    if all(getattr(template, name) == value for name, value in changes.items()):
        return template
    return msgspec.structs.replace(template, id=None, **changes)


def _variants(template: StreamFault, chunks: int, deadline_s: float) -> st.SearchStrategy[StreamFault]:
    """The fault and its variants: at which chunk, how long a stall, with or without Retry-After.

    Each parameter's first choice is the template's own, so shrinking ends on catalogue entries where it can.
    """
    changes: dict[str, st.SearchStrategy[Any]] = {}
    if isinstance(template, Disconnect | Stall | Truncate | StreamError) and template.after_chunks is not None:
        changes["after_chunks"] = st.integers(0, max(chunks, template.after_chunks))
    if isinstance(template, Stall):
        # A stall that outlasts the deadline: an agent without an idle timeout waits on it for good.
        changes["seconds"] = st.sampled_from(list(dict.fromkeys([template.seconds, 2 * deadline_s])))
    if isinstance(template, HttpError) and template.retry_after is not None:
        changes["retry_after"] = st.sampled_from([template.retry_after, None])
    if not changes:
        return st.just(template)
    return st.fixed_dictionaries(changes).map(functools.partial(_vary, template))


def _schedules(
    catalogue: Sequence[StreamFault], calls: int, chunks: int, max_faults: int, deadline_s: float, timing: Timing
) -> st.SearchStrategy[Schedule]:
    # A retry takes the next call number, so a second fault may land on a call the fault-free run never made.
    call = st.integers(1, calls + max_faults - 1)
    fault = st.one_of([_variants(template, chunks, deadline_s) for template in catalogue])
    items = st.lists(st.tuples(call, fault), min_size=1, max_size=max_faults, unique_by=lambda item: item[0])

    def schedule(drawn: list[tuple[int, StreamFault]]) -> Schedule:
        ordered = sorted(drawn, key=lambda item: item[0])
        return Schedule(tuple(Targeted(calls=[number], fault=fault) for number, fault in ordered), timing)

    return items.map(schedule)


# -- the search ----------------------------------------------------------------------------------


def _check(max_faults: int, max_examples: int, seed: int, timing: Timing) -> None:
    problems = []
    if type(max_faults) is not int or max_faults < 1:
        problems.append(f"max_faults must be an integer >= 1, got {max_faults!r}")
    if type(max_examples) is not int or max_examples < 1:
        problems.append(f"max_examples must be an integer >= 1, got {max_examples!r}")
    if type(seed) is not int:
        problems.append(f"seed must be an integer, got {seed!r}")
    if not isinstance(timing, Timing):
        problems.append(f"timing must be a Timing (Timing.recorded(), ...), got {timing!r}")
    if problems:
        raise LlmError("fault search: " + "; ".join(problems), ErrorCode.INVALID_CONFIG)


def search_faults(
    agent: Agent,
    cassette: Cassette | LazyCassette | str | os.PathLike[str],
    *,
    faults: FaultCatalogue = STANDARD_FAULTS,
    max_faults: int = 2,
    max_examples: int = 200,
    seed: int = 0,
    deadline_s: float = DEFAULT_DEADLINE_S,
    timing: Timing = Timing.recorded(),  # noqa: B008 - Timing is frozen
    database: Database = "default",
    key: str | None = None,
    replay_options: Mapping[str, Any] | None = None,
) -> SearchResult:
    """Search for the smallest fault schedule under which ``agent(adapter)`` raises or hangs.

    ``agent`` gets a fresh replaying adapter (streaming as ``ReplayAdapter`` does) over ``cassette`` per run, with
    the drawn schedule and ``timing`` (plus ``replay_options``: ``match_on``, ``faults`` always applied, ...).
    Schedules hold 1 to ``max_faults`` faults drawn from ``faults`` (a catalogue like ``STANDARD_FAULTS``, or a
    list). ``database`` is hypothesis's example database (``"default"``: its configured one; None: none), under
    ``key`` (default: the agent's qualified name). Call it from synchronous code: every run has its own event loop.
    """
    _check(max_faults, max_examples, seed, timing)
    catalogue = _catalogue(faults)
    source = as_lazy(cassette)
    options = dict(replay_options or {})
    base = parse_faults(options.pop("faults", ()))

    def replay(schedule: Sequence[Fault]) -> _Replay:
        return _Replay(Playback(source, ReplayOptions.of(None, timing=timing, faults=[*base, *schedule], **options)))

    baseline = replay(())
    error = run_virtual(agent, baseline, deadline_s)
    if error is not None:
        return SearchResult(Schedule((), timing), error, 0, 0, baseline.playback.calls, seed, deadline_s)
    if baseline.playback.calls == 0:
        raise LlmError(
            "fault search: the agent made no stream() call on the adapter it was given: there is nothing to inject "
            "faults into",
            ErrorCode.INVALID_CONFIG,
        )
    chunks = max(len(source.interaction(index).events) for index in range(len(source))) if len(source) else 0
    strategy = _schedules(catalogue, baseline.playback.calls, chunks, max_faults, deadline_s, timing)
    tally = _Tally()

    def fails(schedule: Schedule) -> bool:
        tally.examples += 1
        error = run_virtual(agent, replay(schedule.faults), deadline_s)
        if error is None:
            return False
        if tally.first is None:
            tally.first = tally.examples
        tally.last = (schedule, error)  # hypothesis runs the shrunk example last
        return True

    store = _Store(hypothesis.settings().database if database == "default" else database, key or _default_key(agent))
    for saved in store.saved(timing):
        if fails(saved):
            assert tally.last is not None
            return SearchResult(*tally.last, tally.examples, tally.first, baseline.playback.calls, seed, deadline_s)
        store.forget(saved)
    settings = hypothesis.settings(
        max_examples=max_examples,
        # hypothesis's own database ignores a fixed seed (@seed implies database=None): _Store keeps failures.
        database=None,
        deadline=None,
        # Not Phase.explain: it traces every line the agent runs, which makes each example many times slower.
        phases=[hypothesis.Phase.generate, hypothesis.Phase.shrink],
        print_blob=False,
        verbosity=hypothesis.Verbosity.quiet,
    )
    try:
        hypothesis.find(strategy, fails, settings=settings, random=random.Random(seed))
    except NoSuchExample:
        return SearchResult(None, None, tally.examples, None, baseline.playback.calls, seed, deadline_s)
    assert tally.last is not None
    store.keep(tally.last[0])
    return SearchResult(*tally.last, tally.examples, tally.first, baseline.playback.calls, seed, deadline_s)


def _default_key(agent: Agent) -> str:
    """A name for ``agent`` that is the same in the next run (no object addresses)."""
    if isinstance(agent, functools.partial):
        return f"{_default_key(agent.func)}{agent.args!r}"
    return f"{getattr(agent, '__module__', '')}.{getattr(agent, '__qualname__', type(agent).__qualname__)}"


class _Store:
    """Failing schedules kept in a hypothesis example database, so the next search tries them first.

    They are kept as the faults' JSON under ``chunktape.fault-search:<key>``; one that no longer fails (or no
    longer decodes) is dropped, as hypothesis drops a fixed failure.
    """

    _decoder = msgspec.json.Decoder(list[Targeted])

    def __init__(self, database: ExampleDatabase | None, key: str) -> None:
        self.database = database
        self.key = f"chunktape.fault-search:{key}".encode()

    def saved(self, timing: Timing) -> list[Schedule]:
        if self.database is None:
            return []
        schedules = []
        for blob in sorted(self.database.fetch(self.key), key=lambda blob: (len(blob), blob)):
            try:
                schedules.append(Schedule(tuple(self._decoder.decode(blob)), timing))
            except (msgspec.DecodeError, LlmError):
                self.database.delete(self.key, blob)
        return schedules

    def keep(self, schedule: Schedule) -> None:
        if self.database is not None:
            self.database.save(self.key, msgspec.json.encode(schedule.faults))

    def forget(self, schedule: Schedule) -> None:
        if self.database is not None:
            self.database.delete(self.key, msgspec.json.encode(schedule.faults))


@dataclass
class _Tally:
    examples: int = 0
    first: int | None = None
    last: tuple[Schedule, BaseException] | None = None


# -- the pytest marker ------------------------------------------------------------------------------

MARKER = "tape_fault_search"
_OPTIONS = tuple(
    name
    for name in inspect.signature(search_faults).parameters
    if name not in ("agent", "cassette", "key", "replay_options")
)
_REPLAY_OPTIONS = ("faults", "match_on", "allow_secrets")
"""What ``@pytest.mark.tape`` sets that every replay of the search keeps."""


def _fail(item: pytest.Function, problem: str) -> BaseException:
    return pytest.fail.Exception(f"{item.nodeid}: @pytest.mark.{MARKER}: {problem}", pytrace=False)


def _coroutine_function(obj: object) -> Callable[..., Coroutine[Any, Any, object]] | None:
    """The async test function behind ``obj``, also when an asyncio plugin wrapped it to run synchronously."""
    while not inspect.iscoroutinefunction(obj):
        obj = getattr(obj, "__wrapped__", None)
        if obj is None:
            return None
    return obj


def run_fault_search(item: pytest.Function) -> None:
    """Run the marked test under the fault search; fail it with the shrunk schedule when one breaks it."""
    marker = item.get_closest_marker(MARKER)
    assert marker is not None
    unknown = sorted(set(marker.kwargs) - set(_OPTIONS))
    if marker.args or unknown:
        raise _fail(item, f"takes keyword arguments only, of {', '.join(_OPTIONS)}; got {unknown or marker.args}")
    test = _coroutine_function(item.obj)
    if test is None:
        raise _fail(item, "the test must be an async function (each run gets its own virtual-time event loop)")
    session = item.funcargs.get("tape")
    if not isinstance(session, CassetteSession):
        raise _fail(item, "the test must use the tape fixture")
    arguments = {name: item.funcargs[name] for name in inspect.signature(test).parameters if name in item.funcargs}

    async def body(adapter: LlmAdapter) -> None:
        if not isinstance(adapter, _Replay) or "tape_server_url" not in arguments:
            await test(**{**arguments, "tape": adapter})
            return
        # This run's server: the drawn schedule's faults, over the run's engine (started and stopped in threads, so
        # the virtual clock waits for them as for any executor job).
        server = replay_server_for(adapter.playback)
        await asyncio.to_thread(server.start)
        try:
            await test(**{**arguments, "tape": adapter, "tape_server_url": server.url})
        finally:
            await asyncio.to_thread(server.stop)

    options = dict(marker.kwargs)
    try:
        # The fault-free run, on the fixture itself: it records when the mode says so, and plays what
        # --tape-strict checks. Its failure is the test's own, raised as it is.
        error = run_virtual(body, session, options.get("deadline_s", DEFAULT_DEADLINE_S))
    except LlmError as invalid:
        raise _fail(item, str(invalid)) from None
    if error is not None:
        raise error
    tape_marker = item.get_closest_marker("tape")
    replay = {key: tape_marker.kwargs[key] for key in _REPLAY_OPTIONS if tape_marker and key in tape_marker.kwargs}
    try:
        result = search_faults(body, session.cassette, key=item.nodeid, replay_options=replay, **options)
    except LlmError as invalid:
        raise _fail(item, str(invalid)) from None
    if result.failure is None:
        return
    report = result.report(name=item.name, cassette=shown(item.config, session.path))
    raise pytest.fail.Exception(f"{item.nodeid}: {MARKER}: {report}", pytrace=False)
