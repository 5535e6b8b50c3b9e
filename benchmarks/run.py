"""`make bench`: run every ``benchmarks/bench_*.py`` module's ``main()`` in turn."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def main() -> None:
    for path in sorted(Path(__file__).parent.glob("bench_*.py")):
        print(f"== {path.stem}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        module.main()


if __name__ == "__main__":
    main()
