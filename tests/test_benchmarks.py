"""``benchmarks/run.py --quick`` still runs end to end and prints its table (figures are never asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_the_quick_benchmark_run_completes_and_prints_one_table() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "run.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "machine: Python" in out
    assert out.count("figure ") == 1  # one table
    for row in (
        "instant replay speed",
        "recording overhead per chunk",
        "open-to-first-match, msgpack",
        "open-to-first-match, json",
        "full decode to chunks, msgpack",
        "full decode to chunks, json",
        "median error per gap",
        "p99 error per gap",
        "peak RSS / decoded size",
        "HTTP path",
        "replay server: SSE events/s",
        "replay server: short streams/s",
    ):
        assert row in out, row
    verdicts = [line.split()[-1] for line in out.splitlines() if line and not line.startswith(" ") and "  " in line]
    assert set(verdicts) <= {"verdict", "PASS", "MISS", "pending"}
