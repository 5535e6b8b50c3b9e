"""Every promise in ``docs/guarantees.md`` names a test, and every test it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMED = re.compile(r"`(test_\w+)::(test_\w+)`")


def _section() -> str:
    return (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")


def test_every_guarantee_names_a_test_that_exists() -> None:
    section = _section()
    promises = [line for line in section.splitlines() if line.startswith("- ")]
    assert len(promises) >= 10
    named = NAMED.findall(section)
    assert len(named) >= len(promises)
    for module, name in named:
        source = (ROOT / "tests" / f"{module}.py").read_text(encoding="utf-8")
        assert re.search(rf"^(async )?def {name}\(", source, re.MULTILINE), f"{module}::{name} is not a test"


def test_every_promise_is_backed_by_a_named_test() -> None:
    blocks = re.split(r"\n(?=- )", _section())
    for block in blocks[1:]:
        assert NAMED.search(block), f"no test backs: {block.splitlines()[0]}"
