"""``chunktape report``: cassettes as one self-contained HTML page (``_report.html`` draws it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chunktape._report.analysis import find_cassette_files
from chunktape._report.html import ReportSource, render_report, write_report
from chunktape.cli._common import EXIT_USAGE, CliError, LongGap, ShowSecrets, console, gap_threshold, load, shown

__all__ = ["report"]

_SUFFIXES = (".html", ".htm")


def report(
    paths: Annotated[list[Path], typer.Argument(help="Cassette files or folders (searched recursively).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write (.html).", show_default=False)],
    title: Annotated[str, typer.Option("--title", help="The page's title.")] = "chunktape report",
    long_gap: LongGap = None,
    show_secrets: ShowSecrets = False,
) -> None:
    """Write one self-contained HTML page for cassettes: a timeline chart per interaction and a summary table.

    Each chart shows the chunk arrivals, the wait for the first chunk, each block's span, the long gaps and
    where the stream ended (completed, raised, cut short, an injected fault). The table lists model, chunks,
    time to first chunk, duration, tokens and outcome; filters (text, outcome, long gaps, duration) pick
    interactions out of a long session. The page loads nothing from the network: open it anywhere.
    Credentials are masked unless --show-secrets.

    Example: chunktape report cassettes/ -o report.html
    """
    if output.suffix.lower() not in _SUFFIXES:
        raise CliError(f"--output {output}: give a .html file name", EXIT_USAGE)
    if output.is_dir():
        raise CliError(f"{output} is a directory; give the report's file name")
    threshold = gap_threshold(long_gap)
    found = find_cassette_files(paths)
    if not found.files:
        raise CliError("no cassette files (*.msgpack, *.json) under the given paths")
    sources = [ReportSource(label=str(path), cassette=shown(load(path), show_secrets)) for path in found.files]
    write_report(render_report(sources, title=title, long_gap_ns=threshold), output)
    count = sum(len(source.cassette.interactions) for source in sources)
    console().print(f"wrote {output}: {len(sources)} cassette(s), {count} interaction(s)", markup=False, soft_wrap=True)
