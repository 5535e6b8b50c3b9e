"""``make bench``: runs every ``benchmarks/bench_*.py`` in one process and prints one table of ratios.

Each module's ``main(quick)`` measures its figures and returns table rows (``bench_core.Row``); this script
prints them together, with the machine they were measured on. ``--quick`` shrinks every workload for a smoke
run (its figures are not the ones to quote).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from pathlib import Path


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


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    here = Path(__file__).parent
    sys.path.insert(0, str(here))
    from bench_core import Row, print_table

    print(f"chunktape benchmarks{' (--quick: smoke run, not figures to quote)' if quick else ''}")
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


if __name__ == "__main__":
    main()
