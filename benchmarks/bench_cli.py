"""CLI start: ``chunktape --version``, ``chunktape show CASSETTE`` (and ``--help``) vs a bare ``python -c pass``.

The CLI starts within 0.25 s of the bare interpreter. Each command runs as its own process (the installed console
script, as a user types it), the four taking turns; the figure is the difference of the medians. ``show`` reads a
small cassette (the demo's, 3 interactions), so its figure is the start plus what the command itself imports.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_core import Row, print_table

NAMES = {
    "version": "CLI start: chunktape --version minus python -c pass",
    "show": "CLI start: chunktape show CASSETTE minus python -c pass",
}
CASSETTE = Path(__file__).resolve().parents[1] / "cassettes" / "demo-session.json"
LIMIT_S = 0.25


def _script() -> list[str]:
    """The console script next to this interpreter (the virtualenv's), else ``python -m chunktape``."""
    script = Path(sys.executable).parent / "chunktape"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "chunktape"]


def _seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(quick: bool = False) -> dict[str, float]:
    """Median seconds of each command over ``runs`` turns."""
    runs = 3 if quick else 21
    commands = {"bare": [sys.executable, "-c", "pass"], "version": [*_script(), "--version"]}
    commands["show"] = [*_script(), "show", str(CASSETTE)]
    commands["help"] = [*_script(), "--help"]
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            times[name].append(_seconds(command))
    return {name: statistics.median(values) for name, values in times.items()}


def main(quick: bool = False) -> list[Row]:
    figures = measure(quick)
    help_ = figures["help"] - figures["bare"]
    rows = []
    for key, name in NAMES.items():
        above = figures[key] - figures["bare"]
        detail = (
            f"python -c pass {figures['bare'] * 1e3:.0f} ms, {key} {figures[key] * 1e3:.0f} ms"
            + (f", --help {figures['help'] * 1e3:.0f} ms (+{help_:.2f} s)" if key == "version" else "")
            + f"; medians of {3 if quick else 21} turns"
        )
        rows.append(Row(name, f"+{above:.3f} s", f"<= +{LIMIT_S} s", above <= LIMIT_S, detail))
    return rows


if __name__ == "__main__":
    print_table(main(quick="--quick" in sys.argv))
