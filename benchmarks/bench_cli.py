"""CLI start: ``chunktape --version``, ``--help``, ``show``, ``check`` and ``convert`` vs a bare ``python -c pass``,
in fresh processes.

Each command starts within 0.25 s of the bare interpreter. Each runs as its own process (the installed console
script, as a user types it), all taking turns in every round, so a slow moment of the machine weighs on each alike;
a figure is the difference of the medians. ``show``, ``check`` and ``convert`` read the example cassette (``convert``
writes a temp file, ``--force``), so their figure is the start plus one small cassette's work.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_core import Row, print_table

NAME = "CLI start: chunktape {command} minus python -c pass"
LIMIT_S = 0.25
EXAMPLE = Path(__file__).resolve().parents[1] / "cassettes" / "demo-session.msgpack"


def _script() -> list[str]:
    """The console script next to this interpreter (the virtualenv's), else ``python -m chunktape``."""
    script = Path(sys.executable).parent / "chunktape"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "chunktape"]


def _seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(quick: bool = False) -> dict[str, float]:
    """Median seconds of each command over ``runs`` rounds."""
    runs = 3 if quick else 21
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "converted.json"
        commands = {
            "bare": [sys.executable, "-c", "pass"],
            "--version": [*_script(), "--version"],
            "--help": [*_script(), "--help"],
            "show": [*_script(), "show", str(EXAMPLE)],
            "check": [*_script(), "check", str(EXAMPLE)],
            "convert": [*_script(), "convert", str(EXAMPLE), str(target), "--force"],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(runs):
            for name, command in commands.items():
                times[name].append(_seconds(command))
    return {name: statistics.median(values) for name, values in times.items()}


def main(quick: bool = False) -> list[Row]:
    figures = measure(quick)
    bare = figures.pop("bare")
    rows = []
    for command, seconds in figures.items():
        above = seconds - bare
        detail = (
            f"python -c pass {bare * 1e3:.0f} ms, chunktape {command} {seconds * 1e3:.0f} ms; "
            f"medians of {3 if quick else 21} rounds"
        )
        rows.append(Row(NAME.format(command=command), f"+{above:.3f} s", f"<= +{LIMIT_S} s", above <= LIMIT_S, detail))
    return rows


if __name__ == "__main__":
    print_table(main(quick="--quick" in sys.argv))
