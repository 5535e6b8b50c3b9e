"""The one layering rule of the package: rooms on floors, imports only downward, no circles, no private reaches.

Every module of ``src/chunktape`` belongs to the room its dotted name starts with (the longest one listed), and
every room stands on one floor. A module may import from its own room and from rooms on lower floors only; the
modules of one room import each other without a circle; and no module takes another module's private name
(``from x import _name``): what a room offers the others is what it names without an underscore. Every import is
read, at module level, inside functions and under ``TYPE_CHECKING`` alike: a dependency hidden in a function is
still one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

FLOORS: list[list[str]] = [
    # 0, below the ground: the bounds on what is read (files a user names, compressed bodies), used by all
    ["chunktape._limits"],
    # 1, the ground: what everything may use, which uses nothing of ours
    [
        "chunktape._version",
        "chunktape._errors",
        "chunktape._lazy",
        "chunktape._httpx",
        "chunktape._virtual_time",
        "chunktape._json_prefix",
    ],
    ["chunktape._abort", "chunktape._secrets"],
    # the protocol: chunks, requests, the adapter
    ["chunktape._protocol", "chunktape.secrets"],
    ["chunktape._validation", "chunktape.wire"],
    # data: the file format, the fault specs and their transforms
    ["chunktape._cassettes", "chunktape.faults"],
    # what makes and consumes streams
    ["chunktape._recorder", "chunktape.providers", "chunktape.harness", "chunktape._report"],
    ["chunktape._replayer"],
    ["chunktape.http"],
    ["chunktape._session"],
    # the faces a user imports, then the two front ends
    ["chunktape"],
    ["chunktape.pytest", "chunktape.cli"],
    ["chunktape.__main__"],
]
"""The rooms, from the ground up. ``docs/ARCHITECTURE.md`` draws the same plan and gives each room's one job."""

FLOOR_OF = {room: number for number, rooms in enumerate(FLOORS) for room in rooms}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    names: tuple[str, ...]
    line: int


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in (SRC / "chunktape").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of ours that ``name`` (a module, or a name inside one) is, or None for another library's."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports() -> Iterator[Import]:
    for module, path in MODULES.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _resolve(alias.name)
                    if target is not None:
                        yield Import(module, target, (), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                if _resolve(base) is None:
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in MODULES:  # a submodule, imported by name
                        yield Import(module, full, (), node.lineno)
                    else:
                        yield Import(module, _resolve(base) or base, (alias.name,), node.lineno)


IMPORTS = [edge for edge in _imports() if edge.importer != edge.imported]


def room_of(module: str) -> str:
    name = module
    while name not in FLOOR_OF:
        if "." not in name:
            raise AssertionError(f"{module} is in no room: add it to a floor of FLOORS")
        name = name.rpartition(".")[0]
    return name


def test_every_module_stands_in_a_listed_room() -> None:
    unplaced = []
    for module in MODULES:
        try:
            room_of(module)
        except AssertionError:
            unplaced.append(module)
    assert unplaced == []


def test_every_listed_room_exists() -> None:
    assert [room for room in FLOOR_OF if room not in MODULES] == []


def test_imports_only_run_downward() -> None:
    def where(module: str) -> str:
        return f"{room_of(module)} on floor {FLOOR_OF[room_of(module)] + 1}"

    upward = [
        f"{edge.importer}:{edge.line} imports {edge.imported} ({where(edge.importer)}, {where(edge.imported)})"
        for edge in IMPORTS
        if room_of(edge.importer) != room_of(edge.imported)
        and FLOOR_OF[room_of(edge.importer)] <= FLOOR_OF[room_of(edge.imported)]
    ]
    assert upward == []


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_modules_import_each_other_in_a_circle() -> None:
    edges: dict[str, set[str]] = {}
    for edge in IMPORTS:
        edges.setdefault(edge.importer, set()).add(edge.imported)
    assert _circles(edges) == []


def test_no_module_takes_another_modules_private_name() -> None:
    reaches = [
        f"{edge.importer}:{edge.line} takes {name} from {edge.imported}"
        for edge in IMPORTS
        for name in edge.names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert reaches == []


def test_the_rule_sees_imports_inside_functions() -> None:
    """The session's HTTP transport is imported where it is used: the rule still counts it."""
    assert any(
        edge.importer == "chunktape._session.session" and edge.imported == "chunktape._session.transport"
        for edge in IMPORTS
    )


@pytest.mark.parametrize(
    ("rooms", "problem"),
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_the_circle_finder_finds_circles(rooms: dict[str, set[str]], problem: list[list[str]]) -> None:
    assert _circles(rooms) == problem
