"""Fault scenarios from a TOML or JSON file, so CI can run a fault matrix without Python code.

A scenario file holds a list of named scenarios; each names a cassette and the faults to replay it with::

    # scenarios.toml
    [[scenarios]]
    name = "rate-limited-twice"
    cassette = "cassettes/agent.msgpack"      # relative to this file
    faults = [{ type = "fail-first", n = 2, fault = { type = "http-error", status = 429, retry_after = 1.0 } }]

    [[scenarios]]
    name = "slow-and-broken"
    cassette = "cassettes/agent.msgpack"
    timing = { mode = "recorded", speed = 2.0 }
    faults = ["stall-30s", { type = "disconnect", after_chunks = 3 }]

    [[scenarios]]
    name = "matrix"
    cassette = "cassettes/agent.msgpack"
    each = "standard"                          # one scenario per STANDARD_FAULTS entry: matrix[http-429], ...
    match_on = "model,messages"                # optional: the matchers (default: the server's, serve --match-on)

A fault is a table with a ``type`` (see ``chunktape.faults``) or the id of a ``STANDARD_FAULTS`` entry.
``each`` (a list of faults, or ``"standard"``) expands a scenario into one scenario per entry, named
``<name>[<fault id>]``, each with the shared ``faults`` plus that one. The JSON form is the same document
(``{"scenarios": [...]}``). Every error is ``LlmError(INVALID_CONFIG)`` naming the scenario and the field.

A scenario name becomes a URL path segment and a response header, so it may not contain ``/``, ``\\``, ``..``,
``?``, ``#``, ``%`` or non-printable characters (control characters, line breaks), nor start or end with a space;
any other text, ``测试`` included, is fine (``_name_problem``: one rule, checked whenever a scenario is made).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import msgspec

from chunktape._cassettes.matching import DEFAULT_MATCH, MATCHERS, parse_match_on
from chunktape._errors import ErrorCode, LlmError
from chunktape._limits import UnreadableFile, read_user_file
from chunktape._replayer.options import ReplayOptions
from chunktape._replayer.timing import Timing
from chunktape.faults import STANDARD_FAULTS, Fault, fault_id, parse_fault

__all__ = [
    "Scenario",
    "load_scenarios",
    "parse_scenarios",
    "scenario_schema",
]

SCENARIO_FORMAT_VERSION = 1
MAX_SCENARIO_FILE_BYTES = 16 << 20
"""The largest scenario file read (16 MiB): one is a few kilobytes of names, faults and paths."""

_NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]
_PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
_MatcherName = Annotated[str, msgspec.Meta(description="a matcher: " + ", ".join(sorted(MATCHERS)))]
_MatchOn = Annotated[
    str, msgspec.Meta(description="matcher names, comma-separated (default: " + ",".join(DEFAULT_MATCH) + ")")
]
_FaultId = Annotated[str, msgspec.Meta(description="a STANDARD_FAULTS id: " + ", ".join(STANDARD_FAULTS))]


class Scenario(msgspec.Struct, frozen=True, kw_only=True):
    """One named replay: a cassette, the faults applied to it, and the timing."""

    name: str
    """Its route is ``/scenarios/<name>/...``: no ``/``, ``..`` or non-printable characters (see ``_name_problem``)."""
    cassette: str
    """The cassette path; ``load_scenarios`` resolves relative paths against the scenario file's folder."""
    faults: tuple[Fault, ...] = ()
    timing: Timing = Timing()
    description: str = ""
    match_on: tuple[str, ...] | None = None
    """The matcher names a request must pass (``MATCHERS``); None: the server's own (``serve --match-on``)."""

    def __post_init__(self) -> None:
        problem = _name_problem(self.name)
        if problem is not None:
            raise _config_error(f"scenario {self.name!r}: field `name`: {problem}")

    def replay_options(self, served: ReplayOptions) -> ReplayOptions:
        """How this scenario replays: the server's options (``served``) with its timing, faults and matchers."""
        if self.match_on is None:
            return ReplayOptions.of(served, timing=self.timing, faults=self.faults)
        return ReplayOptions.of(served, timing=self.timing, faults=self.faults, match_on=self.match_on)


MAX_NAME_LENGTH = 200
"""The longest scenario name: a route segment and a header value, well within any URL or header limit."""


def _name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a scenario, or None when it can: the one rule for the route
    (``/scenarios/<name>/v1/...``) and the header (``x-chunktape-scenario``), checked when a scenario is made.

    A ``/``, ``\\`` or ``..`` would change the route's path, and ``?``, ``#`` or ``%`` what a URL holding it
    means; a non-printable character (a control character, CR/LF, a Unicode line separator) cannot go in a URL
    or a header, nor can whitespace at either end of a header value (HTTP trims it: ``" "`` would name nothing).
    Anything else (``测试``, ``rate-limited twice``) is fine: the server percent-encodes what is not ASCII.
    """
    if not name:
        return "a scenario name cannot be empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"a scenario name is at most {MAX_NAME_LENGTH} characters, got {len(name)}"
    if not name.isprintable():
        bad = next(char for char in name if not char.isprintable())
        return f"a scenario name cannot contain the non-printable character {bad!r}"
    if name != name.strip():
        return "a scenario name cannot start or end with a space (a header value cannot)"
    if "/" in name or "\\" in name:
        return "a scenario name cannot contain '/' or '\\' (it is one segment of the route's path)"
    if ".." in name:
        return "a scenario name cannot contain '..'"
    bad_url = next((char for char in name if char in "?#%"), None)
    if bad_url is not None:
        return f"a scenario name cannot contain {bad_url!r} (it changes what a URL holding it means)"
    return None


class _ScenarioSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1)]
    cassette: Annotated[str, msgspec.Meta(min_length=1)]
    faults: list[Any] = []
    each: list[Any] | Literal["standard"] | None = None
    timing: Timing = Timing()
    description: str = ""
    match_on: str | list[str] | None = None


class _LooseFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: int = SCENARIO_FORMAT_VERSION
    scenarios: list[Any] = []


def _config_error(message: str) -> LlmError:
    return LlmError(message, ErrorCode.INVALID_CONFIG)


def load_scenarios(path: str | Path, problems: list[str] | None = None) -> list[Scenario]:
    """Read a ``.toml`` or ``.json`` scenario file; relative cassette paths are resolved against its folder.

    ``problems`` collects the problems of single scenarios rather than raising (see ``parse_scenarios``).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise _config_error(f"{path}: scenario files end in .toml or .json, got {suffix or 'no suffix'!r}")
    try:
        data = read_user_file(path, limit=MAX_SCENARIO_FILE_BYTES)
    except UnreadableFile as exc:
        raise _config_error(f"cannot read the scenario file: {exc}") from None
    try:
        document = msgspec.toml.decode(data) if suffix == ".toml" else msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise _config_error(f"{path}: not valid {suffix[1:].upper()} ({exc})") from None
    try:
        scenarios = parse_scenarios(document, problems)
    except LlmError as exc:
        raise _config_error(f"{path}: {exc.message}") from None
    base = path.parent
    return [
        msgspec.structs.replace(scenario, cassette=str(base / scenario.cassette))
        if not Path(scenario.cassette).is_absolute()
        else scenario
        for scenario in scenarios
    ]


class ScenarioEntry(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ``[[scenarios]]`` entry: a cassette replayed with faults; ``each`` makes one scenario per fault.

    (The typed form, for the JSON Schema; ``_ScenarioSpec`` reads an entry loosely first, so that an error can
    name the position of a bad fault.)"""

    name: Annotated[str, msgspec.Meta(min_length=1, description="the route /scenarios/<name>/; no '/', '..'")]
    cassette: Annotated[str, msgspec.Meta(min_length=1, description="the cassette, relative to this file")]
    faults: list[Fault | _FaultId] = []
    each: list[Fault | _FaultId] | Literal["standard"] | None = None
    timing: Timing = Timing()
    description: str = ""
    match_on: _MatchOn | list[_MatcherName] | None = None


class ScenarioFile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A scenario file: ``chunktape serve --scenarios FILE`` gives each scenario its own endpoint."""

    version: int = SCENARIO_FORMAT_VERSION
    scenarios: list[ScenarioEntry]


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file (TOML or JSON, the same document), generated by msgspec."""
    return msgspec.json.schema(ScenarioFile)


def parse_scenarios(document: object, problems: list[str] | None = None) -> list[Scenario]:
    """Scenarios from an already decoded document (``{"scenarios": [...]}``); cassette paths are kept as given.

    With ``problems``, a scenario that is wrong is left out and its problem appended there (one line each),
    so ``chunktape scenarios check`` reports them all; otherwise the first one raises.
    """
    if not isinstance(document, Mapping):
        raise _config_error(f"expected a table with a 'scenarios' list, got {type(document).__name__}")
    try:
        spec_file = msgspec.convert(document, _LooseFile)
    except msgspec.ValidationError as exc:
        raise _config_error(f"invalid scenario file: {exc}") from None
    if spec_file.version > SCENARIO_FORMAT_VERSION:
        raise _config_error(
            f"scenario file version {spec_file.version} is newer than this chunktape reads "
            f"({SCENARIO_FORMAT_VERSION}); upgrade chunktape"
        )
    if not spec_file.scenarios:
        raise _config_error("the file defines no scenarios (add a [[scenarios]] table)")
    result: list[Scenario] = []
    seen: set[str] = set()
    for position, raw in enumerate(spec_file.scenarios):
        try:
            expanded = _expand(raw, position, seen)
        except LlmError as exc:
            if problems is None:
                raise
            problems.append(exc.message)
            continue
        result.extend(expanded)
    return result


def _expand(raw: object, position: int, seen: set[str]) -> list[Scenario]:
    """The scenarios one entry of the file stands for (one per ``each`` fault), checked; names join ``seen``."""
    label = _label(raw, position)
    try:
        spec = msgspec.convert(raw, _ScenarioSpec)
    except msgspec.ValidationError as exc:
        raise _config_error(f"{label}: {exc}") from None
    problem = _name_problem(spec.name)
    if problem is not None:
        raise _config_error(f"{label}: field `name`: {problem}")
    shared = tuple(_fault(label, "faults", index, item) for index, item in enumerate(spec.faults))
    match_on = None if spec.match_on is None else _matchers(label, spec.match_on)
    expanded: list[tuple[str, tuple[Fault, ...]]]
    if spec.each is None:
        expanded = [(spec.name, shared)]
    else:
        items: list[Any] = list(STANDARD_FAULTS) if spec.each == "standard" else spec.each
        if not items:
            raise _config_error(f"{label}: field `each` lists no faults")
        expanded = []
        for index, item in enumerate(items):
            fault = _fault(label, "each", index, item)
            expanded.append((f"{spec.name}[{fault_id(fault)}]", (*shared, fault)))
    result: list[Scenario] = []
    for name, faults in expanded:
        if name in seen:
            raise _config_error(f"{label}: field `name`: duplicate scenario name {name!r}")
        seen.add(name)
        result.append(
            Scenario(
                name=name,
                cassette=spec.cassette,
                faults=faults,
                timing=spec.timing,
                description=spec.description,
                match_on=match_on,
            )
        )
    return result


def _label(raw: object, position: int) -> str:
    name = raw.get("name") if isinstance(raw, Mapping) else None
    return f"scenario {name!r} (#{position + 1})" if isinstance(name, str) else f"scenario #{position + 1}"


def _matchers(label: str, match_on: str | list[str]) -> tuple[str, ...]:
    try:
        return tuple(str(name) for name in parse_match_on(match_on))
    except LlmError as exc:
        raise _config_error(f"{label}: field `match_on`: {exc.message}") from None


def _fault(label: str, field: str, index: int, item: object) -> Fault:
    try:
        return parse_fault(cast("Fault | str | Mapping[str, Any]", item))
    except LlmError as exc:
        message = exc.message.removeprefix("invalid fault spec: ")
        raise _config_error(f"{label}: field `{field}[{index}]`: {message}") from None
