"""The ``chunktape`` typer app: the commands, and the one place where failures become one line and an exit code.

Exit codes: 0 ok; 1 a check failed (``check`` found a bad file, ``diff`` a difference); 2 a usage error (typer's,
or a bad option value such as an unknown fault id); 3 the command could not do its job (a missing or corrupt
file, no API key, a provider error, a busy port); 130 interrupted. ``--debug`` shows the traceback.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import traceback
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from typer.core import TyperCommand, TyperGroup

from chunktape import __version__
from chunktape._errors import LlmError
from chunktape.cli._common import (
    EXIT_INTERRUPTED,
    EXIT_RUNTIME,
    EXIT_USAGE,
    CliError,
    err_console,
    one_line,
    with_cli_hint,
)

__all__ = ["app", "main"]


class _State:
    debug = False
    command: str | None = None


_state = _State()


def _report(message: str) -> None:
    from chunktape._secrets import redact_text  # its patterns only for an error

    err_console().print(
        f"chunktape: error: {one_line(redact_text(message))}", style="red", markup=False, soft_wrap=True
    )


_COMMANDS: Final[Mapping[str, tuple[str, str]]] = {
    "record": ("chunktape.cli._record", "record"),
    "play": ("chunktape.cli._play", "play"),
    "show": ("chunktape.cli._files", "show"),
    "check": ("chunktape.cli._files", "check"),
    "convert": ("chunktape.cli._files", "convert"),
    "diff": ("chunktape.cli._files", "diff"),
    "report": ("chunktape.cli._report", "report"),
    "redact": ("chunktape.cli._files", "redact_cassette"),
    "recover": ("chunktape.cli._files", "recover_journal"),
    "import-vcr": ("chunktape.cli._import_vcr", "import_vcr"),
    "serve": ("chunktape.cli._serve", "serve"),
    "proxy": ("chunktape.cli._proxy", "proxy"),
    "demo": ("chunktape.cli._demo", "demo"),
    "scenarios": ("chunktape.cli._scenarios", "app"),
}
"""Each command (in the order ``--help`` lists them) by the module and name of its function, or of its typer app."""


def _command(name: str) -> Any:
    """The click command ``name``, its module loaded now: only the command that runs pays for its imports."""
    module, attribute = _COMMANDS[name]
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        return _plain_when_narrow(_reflow_help(typer.main.get_group(target)))
    single = typer.Typer(add_completion=False)
    help_text, epilog = _example_last(inspect.getdoc(target) or "")
    single.command(name, help=help_text, epilog=epilog)(target)
    return _plain_when_narrow(_reflow_help(typer.main.get_command(single)))


NARROW_COLUMNS = 72
"""Below this width rich's option tables cut option names and words short (``--outp…``, ``casset…``): the help is
click's plain text there, wrapped to the terminal, every word whole."""


def _narrow() -> int | None:
    """The terminal's width when it is narrower than ``NARROW_COLUMNS`` (``COLUMNS`` first, as rich reads it)."""
    import shutil

    columns = shutil.get_terminal_size((80, 24)).columns
    return columns if 0 < columns < NARROW_COLUMNS else None


_HelpFormatter: Any = typer.Context.formatter_class
"""click's help formatter, as typer's public ``Context`` names it."""


class _NarrowFormatter(_HelpFormatter):  # type: ignore[misc]  # click's formatter, typed Any here
    """click's help formatter whose option column takes a third of a narrow terminal at most (click's is 30 columns
    wide, which leaves a 40-column terminal ten for the help, cut mid-word): a longer option name has the line to
    itself, its help under it."""

    def write_dl(self, rows: Any, col_max: int = 30, col_spacing: int = 2) -> None:
        super().write_dl(rows, col_max=min(col_max, max(8, self.width // 3)), col_spacing=col_spacing)


class _NarrowContext(typer.Context):
    formatter_class = _NarrowFormatter


def _plain_when_narrow(command: Any) -> Any:
    """``command`` (and a group's commands) with plain help on a narrow terminal."""
    if _narrow() is not None:
        command.rich_markup_mode = None
        command.context_class = _NarrowContext
        for sub in getattr(command, "commands", {}).values():
            _plain_when_narrow(sub)
    return command


_OWN_LINE = ("Example:", "$ ", "- ", " ")
"""How a line of help text starts that stays a line of its own: an example, a shell line, a bullet, an indent."""


def _reflowed(text: str) -> str:
    """Help text whose paragraphs the terminal wraps: inside a paragraph the source's line breaks (there to keep the
    code within its columns) become spaces, so ``--help`` fills whatever width the terminal has instead of breaking
    each line twice; a line starting as ``_OWN_LINE`` lists stays one, and a paragraph marked ``\\b`` (click's
    no-rewrap mark) is left as written."""
    paragraphs = []
    for paragraph in text.split("\n\n"):
        if paragraph.startswith("\b"):
            paragraphs.append(paragraph)
            continue
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and line.strip() and not line.startswith(_OWN_LINE):
                lines[-1] = f"{lines[-1].rstrip()} {line.strip()}"
            else:
                lines.append(line.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def _reflow_help(command: Any) -> Any:
    """``command`` (and a group's commands) with its help and epilog ``reflowed``."""
    for attribute in ("help", "epilog", "short_help"):
        text = getattr(command, attribute, None)
        if isinstance(text, str):
            setattr(command, attribute, _reflowed(text))
    for sub in getattr(command, "commands", {}).values():
        _reflow_help(sub)
    return command


def _example_last(doc: str) -> tuple[str, str | None]:
    """A command's docstring split into its help and its ``Example:`` paragraph, which ``--help`` shows last,
    after the options (as git and curl end theirs)."""
    head, found, example = doc.rpartition("\n\nExample:")
    return (head, f"Example:{example}") if found else (doc, None)


def _summary(name: str) -> str | None:
    """A command's one-line help, read from its module's source without importing it (and what it imports)."""
    import ast
    import importlib.util

    module, attribute = _COMMANDS[name]
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return None  # no source to read (a sourceless install): the command is loaded instead
    for node in ast.parse(Path(origin).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name == attribute:
            return _reflowed((ast.get_docstring(node) or "").split("\n\n", 1)[0])
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == attribute for t in node.targets):
            for keyword in getattr(node.value, "keywords", []):
                if keyword.arg == "help" and isinstance(keyword.value, ast.Constant):
                    return _reflowed(str(keyword.value.value).split("\n\n", 1)[0])
    return ""


class _Commands(MutableMapping[str, Any]):
    """The group's commands by name, each built on first use (``chunktape --version`` builds none); while the
    group's ``--help`` lists them, a command not built yet is only its name and one-line help."""

    def __init__(self, built: Mapping[str, Any]) -> None:
        self._built = dict(built)
        self.listing = False

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in _COMMANDS:
                raise KeyError(name)
            summary = _summary(name) if self.listing else None
            if summary is not None:
                return TyperCommand(name, short_help=summary)
            self._built[name] = _command(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(_COMMANDS), **self._built})

    def __len__(self) -> int:
        return len({*_COMMANDS, *self._built})


class _Group(TyperGroup):
    """Runs a command and turns every failure into one line on stderr and a documented exit code."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = _Commands(self.commands)
        self.commands = self._lazy

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # the names only: listing them loads no command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """The group's help lists every command without loading one (``serve`` would load the server stack)."""
        self._lazy.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._lazy.listing = False

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        _state.debug = bool(os.environ.get("CHUNKTAPE_DEBUG"))
        _state.command = None
        narrow = _narrow()
        if narrow is not None:  # click's own help, to the terminal's width (its default never goes below 50)
            self.rich_markup_mode = None
            self.context_class = _NarrowContext
            extra.setdefault("terminal_width", narrow - 2)
        code: int = 0
        try:
            result = super().main(args, prog_name or "chunktape", complete_var, False, windows_expand_args, **extra)
            code = result if isinstance(result, int) else 0
        except typer.Exit as exit_:
            code = exit_.exit_code
        except (typer.Abort, KeyboardInterrupt):
            err_console().print("interrupted", style="yellow")
            code = EXIT_INTERRUPTED
        except typer.TyperException as error:  # click's usage errors (typer vendors click)
            code = getattr(error, "exit_code", EXIT_USAGE)
            message = error.format_message() if hasattr(error, "format_message") else str(error)
            if type(error).__name__ == "NoArgsIsHelpError":
                err_console().print(message, markup=False, highlight=False)
            else:
                ctx = getattr(error, "ctx", None)
                command = ctx.command_path if ctx is not None else "chunktape"
                _report(f"{message} (see {command} --help)" if code == EXIT_USAGE else message)
        except CliError as error:
            self._debug()
            _report(error.message)
            code = error.exit_code
        except LlmError as error:
            self._debug()
            _report(with_cli_hint(error, _state.command))
            code = EXIT_RUNTIME
        except OSError as error:
            self._debug()
            where = f"{error.filename}: " if error.filename else ""
            _report(f"{where}{error.strerror or error}")
            code = EXIT_RUNTIME
        except Exception as error:
            self._debug()
            _report(f"unexpected {type(error).__name__}: {error} (rerun with --debug for the traceback)")
            code = EXIT_RUNTIME
        if standalone_mode:
            sys.exit(code)
        return code

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        _state.command = name  # for the hints of its errors
        return name, command, rest

    @staticmethod
    def _debug() -> None:
        if _state.debug:
            traceback.print_exc(file=sys.stderr)


app = typer.Typer(
    cls=_Group,
    name="chunktape",
    help="Record and replay LLM adapter streams, chunk by chunk with timing, and inject faults.\n\n"
    "Exit codes: 0 ok, 1 check failed or difference found, 2 usage error, 3 runtime error "
    "(missing or corrupt file, no API key, provider error, busy port), 130 interrupted.",
    epilog="Example: chunktape demo --out . && chunktape show --timeline demo-session.msgpack",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"chunktape {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the traceback of an error (or set CHUNKTAPE_DEBUG=1).")
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Record and replay LLM adapter streams, chunk by chunk with timing, and inject faults."""
    _state.debug = _state.debug or debug


def main() -> None:
    """The console script: ``chunktape ...``."""
    app()
