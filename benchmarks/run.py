"""``make bench``: runs every ``benchmarks/bench_*.py`` in one process and prints its ratios."""

from __future__ import annotations

import importlib.util
import platform
import sys
from pathlib import Path


def main() -> None:
    here = Path(__file__).parent
    print(f"chunktape benchmarks — Python {platform.python_version()} on {platform.machine()}")
    for path in sorted(here.glob("bench_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        print(f"\n== {path.stem}")
        module.main()


if __name__ == "__main__":
    main()
