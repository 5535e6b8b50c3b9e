"""``import chunktape`` and the CLI's start load no HTTP or server stack, no pytest, not even the protocol's msgspec
and asyncio or the CLI's rich (the CLI-start figure is measured in ``benchmarks/bench_cli.py``); the
lazily loaded names stay the same objects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = (
    "httpx2",
    "httpx",
    "starlette",
    "uvicorn",
    "pytest",
    "looptime",
    "chunktape._cassettes.codec",
    "msgspec",
    "asyncio",
    "rich",
)


def _loaded(statement: str) -> list[str]:
    code = f"import sys\n{statement}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_import_chunktape_loads_no_cassette_codec_and_no_http_stack() -> None:
    assert _loaded("import chunktape") == []


@pytest.mark.parametrize("statement", ["import chunktape.http", "import chunktape.providers"])
def test_http_and_providers_packages_load_their_stack_on_first_use(statement: str) -> None:
    assert not {"httpx2", "starlette", "uvicorn"} & set(_loaded(statement))


def test_the_cli_starts_without_the_http_and_server_stack_or_pytest() -> None:
    """Each command's module loads when it runs (``serve`` the server, ``record`` httpx, ...), none at the start."""
    assert _loaded("import chunktape.cli") == []


def test_a_command_with_options_runs_without_pydantic() -> None:
    """typer 0.29 coerces each option through a pydantic ``TypeAdapter``: every command imported pydantic and built
    them, about half of its start (pyproject excludes that release). ``--debug check PATH``: an option, an argument."""
    cassette = Path(__file__).resolve().parents[1] / "cassettes" / "demo-session.msgpack"
    code = (
        "import sys\nfrom chunktape.cli import app\n"
        f"try:\n    app(['--debug', 'check', {str(cassette)!r}])\n"
        "except SystemExit as exit:\n    assert exit.code == 0, exit\n"
        "print('pydantic' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split()[-1] == "False"


def test_lazy_names_are_the_defining_modules_objects() -> None:
    import chunktape
    import chunktape.http
    from chunktape._replayer import ReplayAdapter
    from chunktape._session.session import use_cassette
    from chunktape.http._server.app import ReplayServer

    assert chunktape.ReplayAdapter is ReplayAdapter
    assert chunktape.use_cassette is use_cassette
    assert chunktape.http.ReplayServer is ReplayServer
    assert chunktape.faults.STANDARD_FAULTS  # a submodule stays reachable as an attribute
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = chunktape.nope  # type: ignore[attr-defined]  # a typo stays a type error


COMMANDS = {
    "--version": ["--version"],
    "--help": ["--help"],
    "show": ["show", "{demo}"],
    "show --timeline": ["show", "--timeline", "{demo}"],
    "check": ["check", "{demo}"],
    "convert": ["convert", "{demo}", "{out}", "--force"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_starting_a_command_loads_no_test_or_server_stack(command: str, tmp_path: Path) -> None:
    """Running ``chunktape --version``, ``show``, ``check``, ``convert`` (and the group's ``--help``, which lists
    every command) imports none of pytest, uvicorn, starlette or looptime, nor the HTTP clients."""
    demo = Path(__file__).resolve().parents[1] / "cassettes" / "demo-session.msgpack"
    args = [arg.format(demo=demo, out=tmp_path / "out.json") for arg in COMMANDS[command]]
    code = (
        "import contextlib, io, sys\nfrom chunktape.cli import app\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    try:\n        app({args!r})\n    except SystemExit as exit:\n        assert exit.code == 0, exit\n"
        "print(' '.join(m for m in ('pytest', 'uvicorn', 'starlette', 'looptime', 'httpx', 'httpx2') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == []


def test_the_groups_help_lists_each_commands_own_one_line_help() -> None:
    """``chunktape --help`` reads each command's one-line help from its source instead of importing it: the same
    words as the loaded command's."""
    import typer

    from chunktape.cli import app

    group = typer.main.get_group(app)
    listed = {}
    group._lazy.listing = True  # type: ignore[attr-defined]  # what format_help sets
    try:
        for name in group.list_commands(None):  # type: ignore[arg-type]
            listed[name] = group.commands[name].short_help
    finally:
        group._lazy.listing = False  # type: ignore[attr-defined]
    for name, summary in listed.items():
        loaded = group.commands[name]
        assert summary == (loaded.short_help or (loaded.help or "").split("\n\n", 1)[0]), name
    assert len(listed) >= 14
