"""The README's and the docs' runnable examples (fenced as ``python exec``) run as written, from an empty folder,
as a pip user would run them: no drift between docs and code, and no block that needs a clone."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [
    block
    for document in DOCUMENTS
    for block in re.findall(r"^```python exec\n(.*?)^```", document.read_text(encoding="utf-8"), flags=re.M | re.S)
]
# Two interpreters, so the two halves run side by side under xdist: the examples on an SDK (each waits on its
# SDK's own retry back-off and loads the SDK) apart from those on chunktape alone.
HALVES = {
    "chunktape": [n for n, block in enumerate(BLOCKS) if "import openai" not in block],
    "sdk": [n for n, block in enumerate(BLOCKS) if "import openai" in block],
}

# Runs each block (``[number, source]``) in a fresh namespace of one fresh interpreter (not pytest's), and writes
# each block's traceback (None: it ran) to the file named by argv[1]: one interpreter start per half, not per block.
RUNNER = """
import json, sys, traceback

results = []
for n, source in json.loads(sys.stdin.read()):
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
    readme = DOCUMENTS[0].read_text(encoding="utf-8")
    assert len(re.findall(r"^```python exec$", readme, flags=re.M)) >= 3


@pytest.mark.parametrize("half", list(HALVES))
def test_every_readme_example_runs(tmp_path: Path, half: str) -> None:
    # From an empty folder, as someone who installed the package would run them.
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    folder = tmp_path / "empty"
    folder.mkdir()
    report = tmp_path / "results.json"
    numbers = HALVES[half]
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(report)],
        input=json.dumps([[n, BLOCKS[n]] for n in numbers]),
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(report.read_text())
    assert len(results) == len(numbers)
    failed = {f"block-{n}": error for n, error in zip(numbers, results, strict=True) if error is not None}
    assert not failed, "\n".join(f"{name}:\n{error}" for name, error in failed.items())
