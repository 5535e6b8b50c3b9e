"""What every command shares: exit codes, the consoles, the one-line error, option parsing helpers.

The CLI's start (``chunktape --version``, and the group before it loads a command) imports this module: what only
some helpers need (rich, msgspec, the cassettes, the faults) loads when one of them is called.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeVar

import typer

from chunktape._errors import AdviceWords, ErrorCode, LlmError

if TYPE_CHECKING:
    from rich.console import Console

    from chunktape._cassettes.model import Cassette
    from chunktape._replayer.timing import Timing
    from chunktape.faults import Fault

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_RUNTIME",
    "EXIT_USAGE",
    "Append",
    "CliError",
    "Force",
    "LongGap",
    "ShowSecrets",
    "check_output_suffix",
    "check_writable_output",
    "console",
    "err_console",
    "gap_threshold",
    "load",
    "one_line",
    "parse_fault_option",
    "shown",
    "timing_option",
    "with_cli_hint",
    "write_cassette",
]

EXIT_OK: Final = 0
"""Success."""
EXIT_FAILED: Final = 1
"""A check failed: ``check`` found a bad file, ``diff`` found a difference, ``demo`` saw an unexpected outcome."""
EXIT_USAGE: Final = 2
"""The command line is wrong (unknown option, missing argument, bad value such as an unknown fault id)."""
EXIT_RUNTIME: Final = 3
"""The command could not do its job: a missing or corrupt file, no API key, a provider error, a busy port."""
EXIT_INTERRUPTED: Final = 130
"""Ctrl-C (``record`` first says what it kept of its recording)."""


class CliError(Exception):
    """A failure reported as one line on stderr, with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_RUNTIME) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


_CLI_HINTS: Final[AdviceWords] = {
    ErrorCode.CASSETTE_NOT_FOUND: "check the path; `chunktape record -o FILE` records a new cassette",
    ErrorCode.CASSETTE_CORRUPT: "is it a chunktape cassette (.msgpack or .json)? `chunktape check FILE` says what "
    "is wrong; if its recording crashed, `chunktape recover FILE.journal` rebuilds it",
    ErrorCode.SECRET_DETECTED: "redact it with `chunktape redact FILE --secret VALUE`",
}
"""Next steps on the command line, replacing the library's words (which name Python arguments). No command replays
by matching a request (``serve`` answers in the server's words), so none meets a mismatch or an exhausted match."""
_COMMAND_HINTS: Final[dict[tuple[str, ErrorCode], str]] = {
    ("recover", ErrorCode.CASSETTE_NOT_FOUND): "check the path; a recording that ended normally leaves no journal",
    ("recover", ErrorCode.CASSETTE_CORRUPT): "give the <cassette>.journal file an interrupted recording left",
    ("import-vcr", ErrorCode.CASSETTE_NOT_FOUND): "check the vcrpy cassette path",
    ("import-vcr", ErrorCode.CASSETTE_CORRUPT): "give a vcrpy YAML cassette of chat-completions traffic",
}


def with_cli_hint(error: LlmError, command: str | None) -> str:
    """``error`` as one line of ``command``'s output, its next step in the command line's words."""
    hint = _COMMAND_HINTS.get((command or "", error.code))
    return error.render({**_CLI_HINTS, error.code: hint} if hint is not None else _CLI_HINTS)


def _no_color() -> bool:
    return bool(os.environ.get("NO_COLOR"))


def _width(file: Any) -> int | None:
    """rich's width, except that a pipe or file gets 120 columns instead of 80 (tables stay readable)."""
    if os.environ.get("COLUMNS"):
        return None
    try:
        return None if file.isatty() else 120
    except (AttributeError, ValueError):
        return 120


class _Consoles:
    """Created on each use, so each run (and each ``CliRunner`` invocation) sees its own stdout/stderr.

    ``emoji=False``: recorded text such as ``:thumbs_up:`` is printed as it is, never as an emoji. Recorded
    text (prompts, replies, paths) is passed as ``rich.text.Text`` or with ``markup=False``, never as markup.
    """

    def out(self) -> Console:
        return self._on(sys.stdout)

    def err(self) -> Console:
        return self._on(sys.stderr)

    @staticmethod
    def _on(file: Any) -> Console:
        from rich.console import Console

        return Console(file=file, no_color=_no_color(), highlight=False, emoji=False, width=_width(file))


_consoles = _Consoles()


def console() -> Console:
    """The console for the command's output (stdout)."""
    return _consoles.out()


def err_console() -> Console:
    """The console for errors and progress (stderr)."""
    return _consoles.err()


def one_line(text: str) -> str:
    """``text`` squeezed onto one line (error messages may carry a multi-line diff)."""
    return " ".join(text.split())


def check_output_suffix(path: Path, what: str = "") -> None:
    """A cassette to write must end in ``.msgpack`` or ``.json`` (the suffix picks the encoding): else a usage error."""
    from chunktape._report.analysis import CASSETTE_SUFFIXES

    if path.suffix.lower() not in CASSETTE_SUFFIXES:
        where = f"{what} " if what else ""
        valid = " or ".join(CASSETTE_SUFFIXES)
        raise CliError(f"{where}{path}: give a {valid} file name (the suffix picks the encoding)", EXIT_USAGE)


Force = Annotated[bool, typer.Option("--force", help="Replace the output cassette if it exists.")]
Append = Annotated[bool, typer.Option("--append", help="Add to the output cassette if it exists.")]


def check_writable_output(path: Path, *, force: bool, append: bool, what: str = "") -> None:
    """Every writer of a user's cassette refuses to replace one silently: an existing ``path`` needs ``--append``
    (add to it) or ``--force`` (replace it), as ``recover`` does; a folder is never an output."""
    where = f"{what} " if what else ""
    if force and append:
        raise CliError("use either --append or --force, not both", EXIT_USAGE)
    if path.is_dir():
        raise CliError(f"{where}{path} is a directory; give the output file name")
    if os.path.lexists(path) and not (force or append):
        raise CliError(f"{where}{path} exists; pass --append to add to it or --force to replace it")


def write_cassette(cassette: Cassette, target: Path, *, append: bool) -> Cassette:
    """``cassette`` saved at ``target`` (atomic), or with ``append`` added to what ``target`` holds (under the
    writers' lock, as every appending save): what the file now holds."""
    from chunktape._cassettes.store import append_interactions, save_cassette

    if append:
        return append_interactions(target, cassette.interactions, cassette.meta, tool_runs=cassette.tool_runs)
    save_cassette(cassette, target)
    return cassette


def load(path: Path) -> Cassette:
    """A cassette by path; a missing or undecodable file is a ``CliError`` (an ``LlmError`` passes through)."""
    from chunktape._cassettes.codec import load_cassette

    if path.is_dir():
        raise CliError(f"{path} is a directory, not a cassette file")
    return load_cassette(path)


ShowSecrets = Annotated[
    bool,
    typer.Option("--show-secrets", help="Print credentials as recorded (masked by default, also allowed ones)."),
]


LongGap = Annotated[
    float | None,
    typer.Option(
        "--long-gap",
        metavar="SECONDS",
        help="A gap between chunks this long or longer is marked long (default: 8x the median gap, at least 0.2).",
        show_default=False,
    ),
]


def gap_threshold(seconds: float | None) -> int | None:
    """``--long-gap SECONDS`` in nanoseconds (None: each timeline's default); not above 0 is a usage error."""
    if seconds is None:
        return None
    if not seconds > 0:
        raise CliError(f"--long-gap must be > 0 seconds, got {seconds:g}", EXIT_USAGE)
    return int(seconds * 1e9)


def shown(cassette: Cassette, show_secrets: bool) -> Cassette:
    """``cassette`` as a terminal may show it: every credential masked, also those it was allowed to keep, unless
    ``--show-secrets``; masked on the reassembled blocks, so a key split over deltas is masked in each."""
    from chunktape._cassettes.redaction import redact
    from chunktape._secrets import env_secrets

    return cassette if show_secrets else redact(cassette, env_secrets().values())


def timing_option(speed: float | None, instant: bool, default: Timing) -> Timing:
    """``--speed X`` / ``--instant`` as a ``Timing``; both at once is a usage error."""
    from chunktape._replayer.timing import Timing

    if instant and speed is not None:
        raise CliError("use either --speed or --instant, not both", EXIT_USAGE)
    if instant:
        return Timing.instant()
    if speed is not None:
        if not speed > 0:
            raise CliError(f"--speed must be > 0, got {speed:g}", EXIT_USAGE)
        return Timing.recorded(speed=speed)
    return default


def parse_fault_option(values: Sequence[str]) -> list[Fault]:
    """``--fault`` values: a ``STANDARD_FAULTS`` id, or a fault as JSON (``{"type": "http-error", ...}``)."""
    import msgspec

    from chunktape.faults import parse_fault

    faults: list[Fault] = []
    for value in values:
        spec: Any = value
        if value.lstrip().startswith("{"):
            try:
                spec = msgspec.json.decode(value)
            except msgspec.DecodeError as exc:
                raise CliError(f"--fault {value!r} is not valid JSON ({exc})", EXIT_USAGE) from None
        try:
            faults.append(parse_fault(spec))
        except LlmError as error:
            raise CliError(f"--fault: {error.message}", EXIT_USAGE) from None
    return faults


_T = TypeVar("_T")


def run_virtual(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` on a virtual-time event loop: every sleep and timeout passes at once in loop time.

    The faults read the loop's clock only, so a stall or a latency runs the same schedule, without the wait.
    """
    import asyncio

    from chunktape._virtual_time import replay_loop

    with asyncio.Runner(loop_factory=replay_loop) as runner:
        return runner.run(coro)
