"""The README's runnable examples (fenced as ``python exec``) run as written: no drift between docs and code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"
BLOCKS = re.findall(r"^```python exec\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.M | re.S)


def test_the_readme_has_runnable_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("source", BLOCKS, ids=[f"block-{n}" for n in range(len(BLOCKS))])
def test_readme_example_runs(source: str) -> None:
    # From the repository root, as a reader would run them (the examples use cassettes/ and temp folders).
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    result = subprocess.run(
        [sys.executable, "-c", source], cwd=README.parent, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
