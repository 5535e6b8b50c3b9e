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
