"""The README's runnable examples (fenced as ``python exec``) run as written: no drift between docs and code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"
BLOCKS = re.findall(r"^```python exec\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.M | re.S)

# Runs each block in a fresh namespace of one fresh interpreter (not pytest's), and writes each block's traceback
# (None: it ran) to the file named by argv[1]: one interpreter start instead of one per block.
RUNNER = """
import json, sys, traceback

results = []
for n, source in enumerate(json.loads(sys.stdin.read())):
    try:
        exec(compile(source, f"<README block-{n}>", "exec"), {"__name__": "__main__"})
    except BaseException:
        results.append(traceback.format_exc())
    else:
        results.append(None)
with open(sys.argv[1], "w", encoding="utf-8") as out:
    json.dump(results, out)
"""


def test_the_readme_has_runnable_examples() -> None:
    assert len(BLOCKS) >= 2


def test_every_readme_example_runs(tmp_path: Path) -> None:
    # From the repository root, as a reader would run them (the examples use cassettes/ and temp folders).
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    report = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(report)],
        input=json.dumps(BLOCKS),
        cwd=README.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    failed = {f"block-{n}": error for n, error in enumerate(json.loads(report.read_text())) if error is not None}
    assert not failed, "\n".join(f"{name}:\n{error}" for name, error in failed.items())
