"""Every ``--help`` wraps its prose to the terminal's width: no line longer than it, and no half-empty line inside a
paragraph (the source's line breaks are not the terminal's), at 80 columns and at 120.

The CLI runs as a process with ``COLUMNS`` set, its output a pipe, as a terminal or a pager reads it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from chunktape.cli._app import _COMMANDS

SUBCOMMANDS = {"scenarios": ["schema", "check"]}
HELPS = [
    [],
    *([name] for name in _COMMANDS),
    *([group, sub] for group, subs in SUBCOMMANDS.items() for sub in subs),
]
SEPARATOR = "=== chunktape help ==="

# One process per width prints every help (one process per command would cost the suite seconds for nothing more).
SCRIPT = textwrap.dedent(
    f"""
    import sys
    from chunktape.cli._app import app

    for args in {HELPS!r}:
        print({SEPARATOR!r}, *args, flush=True)
        app([*args, "--help"], standalone_mode=False)
        sys.stdout.flush()
    """
)
BOX = ("╭", "│", "╰")


def helps(columns: int) -> dict[str, str]:
    environment = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "dumb"}
    environment.pop("TERMINAL_WIDTH", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=environment, timeout=120, check=True
    )
    found: dict[str, str] = {}
    for block in done.stdout.split(SEPARATOR)[1:]:
        title, _, text = block.partition("\n")
        found[title.strip() or "chunktape"] = text
    assert len(found) == len(HELPS), done.stdout
    return found


def prose_problems(text: str, columns: int) -> list[str]:
    """Lines longer than the terminal, and lines of a paragraph that left room for the next line's first word."""
    problems = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if len(line) > columns:
            problems.append(f"longer than {columns}: {line!r}")
        following = lines[number + 1] if number + 1 < len(lines) else ""
        if not line.strip() or not following.strip() or line.lstrip().startswith(BOX):
            continue
        if following.lstrip().startswith((*BOX, "Example:", "Usage:")):
            continue
        word = following.split()[0]
        # rich pads the text with one column on each side: a line holds columns - 2 characters after its pad.
        if len(line.rstrip()) + 1 + len(word) <= columns - 1:
            problems.append(f"half-empty at {columns}: {line.rstrip()!r} before {word!r}")
    return problems


@pytest.mark.parametrize("columns", [80, 120])
def test_every_help_fills_the_terminal_width(columns: int) -> None:
    found = helps(columns)
    problems = {name: prose_problems(text, columns) for name, text in found.items()}
    assert {name: lines for name, lines in problems.items() if lines} == {}
    serve = " ".join(found["serve"].split())
    assert "Each interaction plays once" in serve  # its paragraphs are the docstring's, whatever the width
    widest = max(len(line.rstrip()) for text in found.values() for line in text.splitlines())
    assert columns - 2 <= widest <= columns


def test_the_console_script_wraps_to_the_terminal_too() -> None:
    """The installed ``chunktape`` itself, as a user runs it (``TERMINAL_WIDTH`` unset: typer's own override)."""
    script = os.path.join(os.path.dirname(sys.executable), "chunktape")
    environment = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
    environment.pop("TERMINAL_WIDTH", None)
    done = subprocess.run(
        [script, "record", "--help"], capture_output=True, text=True, env=environment, timeout=60, check=True
    )
    assert prose_problems(done.stdout, 80) == []
    assert "Give the input with --prompt" in done.stdout


def test_a_narrow_terminal_gets_every_option_name_and_word_whole() -> None:
    """At 40 columns rich's option tables cut names and words short (``--outp…``, ``casset…``): a user could not
    read which option to pass. There the help is click's plain text: no ellipsis, every option spelled out, and
    no line past the terminal but an option's own spelling (``--serializer <auto|yaml|json|parsed-body>``)."""
    found = helps(40)
    for name, text in found.items():
        assert "…" not in text, name
        for line in text.splitlines():
            assert len(line) <= 40 or line.strip().startswith("-"), (name, line)
    assert "-o, --output <path>" in found["import-vcr"]
    assert "--keep-undecodable" in found["import-vcr"]
    assert "--match-on" in found["serve"]
