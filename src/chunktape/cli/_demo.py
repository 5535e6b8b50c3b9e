"""``chunktape demo``: its options; the loop itself (``demo_loop.py``: the harness, the scripted provider, the
recorder and the replayer) loads when the command runs, not when the CLI starts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chunktape.cli._common import EXIT_USAGE, CliError

__all__ = ["demo"]


def demo(
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Keep the demo cassette in this folder (default: a temp folder).")
    ] = None,
    speed: Annotated[float, typer.Option("--speed", help="Replay speed for step 3.")] = 10.0,
) -> None:
    """Run the whole record, show, replay and fault loop offline, in seconds.

    On the embedded ScriptedAdapter: record a tool-calling agent session, show it, replay it at 10x, and run
    the reference harness against every standard fault.

    Example: chunktape demo --out demo-out
    """
    if not speed > 0:
        raise CliError(f"--speed must be > 0, got {speed:g}", EXIT_USAGE)
    from chunktape.cli._demo_loop import run_demo

    run_demo(out_dir, speed)
