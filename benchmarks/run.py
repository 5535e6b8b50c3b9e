"""``make bench``: runs every ``benchmarks/bench_*.py`` in one process and prints one table of ratios.

Each module's ``main(quick)`` measures its figures and returns table rows (``bench_core.Row``); this script
prints them together, with the machine they were measured on. ``--quick`` shrinks every workload (its figures
are not the ones to quote). ``--smoke`` is ``--quick`` plus a check that every figure of the table was measured,
exiting non-zero otherwise: ``make bench`` runs it first, so a broken benchmark fails in seconds, not after the
full run, and the test suite never times anything.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench_core import Row

# The figures the table must hold (a row's name starts with one of these).
EXPECTED_ROWS = (
    "instant replay speed",
    "fresh cassette replayed once",
    "recording overhead per chunk",
    "open-to-first-match, msgpack vs vcrpy",
    "open-to-first-match, json vs vcrpy",
    "full decode to chunks, msgpack vs vcrpy",
    "full decode to chunks, json vs vcrpy",
    "open-to-first-match, msgpack vs cassetter YAML (200 x 500)",
    "open-to-first-match, json vs cassetter YAML (200 x 500)",
    "full decode to chunks, msgpack vs cassetter + SSE + json.loads (200 x 500)",
    "full decode to chunks, json vs cassetter + SSE + json.loads (200 x 500)",
    "open-to-first-match, msgpack vs cassetter YAML (1,000 x",
    "open-to-first-match, json vs cassetter YAML (1,000 x",
    "full decode to chunks, msgpack vs cassetter + SSE + json.loads (1,000 x",
    "full decode to chunks, json vs cassetter + SSE + json.loads (1,000 x",
    "recorded-timing replay, idle: median error per gap",
    "recorded-timing replay, idle: p99 error per gap",
    "recorded-timing replay, one busy CPU-bound process beside it: median error per gap",
    "recorded-timing replay, one busy CPU-bound process beside it: p99 error per gap",
    "peak RSS / decoded size",
    "per test in a 200-test suite: tape fixture",
    "per test in a 200-test suite: openai SDK on tape.transport()",
    "HTTP path",
    "SDK replay in process: 1,000 short streams through openai",
    "raw httpx2 client in process: 1,000 short streams",
    "raw httpx2 client in process: 200 x 500 session",
    "replay server: chunks/s, chunktape serve vs aimock, 1 httpx2 client",
    "replay server: chunks/s, chunktape serve vs aimock, 10 httpx2 client",
    "replay server: chunks/s, chunktape serve vs aimock, 100 httpx2 client",
    "replay server: short streams/s",
    "CLI start: chunktape --version",
    "CLI start: chunktape --help",
    "CLI start: chunktape show",
    "CLI start: chunktape check",
    "CLI start: chunktape convert",
)
VERDICTS = {"PASS", "MISS", "pending"}


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = "" if not hasattr(os, "getloadavg") else f", load average {os.getloadavg()[0]:.1f} at start"
    python = f"Python {platform.python_version()} ({platform.python_implementation()})"
    return f"{python}, {os.cpu_count()} cores, {model}{load}"


def smoke_problems(rows: list[Row]) -> list[str]:
    """What a smoke run found missing or malformed in the table (empty: every benchmark ran)."""
    problems = [f"no row for {name!r}" for name in EXPECTED_ROWS if not any(name in row.name for row in rows)]
    problems += [f"{row.name}: verdict {row.verdict!r}" for row in rows if row.verdict not in VERDICTS]
    problems += [f"{row.name}: no measured value" for row in rows if not row.value.strip()]
    return problems


def main() -> None:
    smoke = "--smoke" in sys.argv[1:]
    quick = smoke or "--quick" in sys.argv[1:]
    here = Path(__file__).parent
    sys.path.insert(0, str(here))
    from bench_core import print_table

    mode = " (--smoke: tiny workloads, checked to run)" if smoke else " (--quick: smoke run, not figures to quote)"
    print(f"chunktape benchmarks{mode if quick else ''}")
    print(f"machine: {machine()}, {platform.system()} {platform.release()}\n")
    rows: list[Row] = []
    for path in sorted(here.glob("bench_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        rows += module.main(quick=quick)
    print_table(rows)
    misses = [row.name for row in rows if row.passed is False]
    print(
        f"\n{len(rows) - len(misses)} of {len(rows)} rows without a MISS"
        + (f"; MISS: {', '.join(misses)}" if misses else "")
    )
    if smoke:
        problems = smoke_problems(rows)
        for problem in problems:
            print(f"smoke: {problem}", file=sys.stderr)
        if problems:
            sys.exit(1)
        print("smoke: every benchmark ran")


if __name__ == "__main__":
    main()
