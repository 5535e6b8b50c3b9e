"""The README's and the docs' runnable examples run as written, from an empty folder, with chunktape installed
non-editable as ``pip install`` leaves it (``installed.py``): no drift between docs and code, and no block that
needs a clone. Every ``python exec`` block runs; so does every ``bash`` block made only of ``chunktape`` commands,
after ``chunktape demo --out .``, except those that need a network or block (``record``, ``serve``, ``proxy``),
which are checked with ``--help``."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from installed import installed_python

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
    "chunktape": [
        n for n, block in enumerate(BLOCKS) if "import openai" not in block and "import anthropic" not in block
    ],
    "sdk": [n for n, block in enumerate(BLOCKS) if "import openai" in block or "import anthropic" in block],
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


IMPORTED = {name for block in BLOCKS for name in re.findall(r"^\s*(?:from|import) (\w+)", block, flags=re.M)}
SDKS = sorted({dist for name in IMPORTED for dist in metadata.packages_distributions().get(name, [])} - {"chunktape"})
"""The distributions the blocks import beside chunktape (the SDKs a user installs themselves: openai...)."""
COMMAND_BLOCKS = [
    [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]
    for document in DOCUMENTS
    for block in re.findall(r"^```bash\n(.*?)^```", document.read_text(encoding="utf-8"), flags=re.M | re.S)
    if all(line.startswith("chunktape ") for line in block.splitlines() if line.strip())
]
"""The ``bash`` blocks of ``chunktape`` commands, one command a line, comments dropped."""
LIVE = ("record", "serve", "proxy")
"""The commands that need a provider or run until Ctrl-C: their ``--help`` is run instead."""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a virtualenv with chunktape[pytest,search] installed non-editable (as the README says to install
    it), and the SDKs the blocks import."""
    return installed_python(tmp_path_factory.mktemp("venv") / "venv", extras=["pytest", "search"], also=SDKS)


def test_the_installed_copy_is_what_runs(installed: Path, tmp_path: Path) -> None:
    code = "import chunktape, importlib.metadata as m; print(chunktape.__file__); print(m.version('chunktape'))"
    done = subprocess.run([str(installed), "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    where, version = done.stdout.split()
    assert "site-packages" in where
    assert not where.startswith(str(ROOT))
    assert version == metadata.version("chunktape")
    plugins = subprocess.run(
        [str(installed), "-c", "import importlib.metadata as m; print(m.entry_points(group='pytest11')['chunktape'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "chunktape.pytest._plugin" in plugins.stdout


def test_the_readme_has_runnable_examples() -> None:
    readme = DOCUMENTS[0].read_text(encoding="utf-8")
    assert len(re.findall(r"^```python exec$", readme, flags=re.M)) >= 3


@pytest.mark.parametrize("half", list(HALVES))
def test_every_readme_example_runs(installed: Path, tmp_path: Path, half: str) -> None:
    # From an empty folder, as someone who installed the package would run them.
    env = {**_clean_env(installed), "PYTHONWARNINGS": "error"}
    folder = tmp_path / "empty"
    folder.mkdir()
    report = tmp_path / "results.json"
    numbers = HALVES[half]
    done = subprocess.run(
        [str(installed), "-c", RUNNER, str(report)],
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


def _clean_env(python: Path) -> dict[str, str]:
    """The environment of a user's shell with the virtualenv active: its ``bin`` first, no ``PYTHONPATH``."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(python.parents[1])
    return env


def test_the_readme_has_a_block_of_commands() -> None:
    assert any(block[0] == "chunktape demo --out ." for block in COMMAND_BLOCKS)


@pytest.mark.parametrize("block", COMMAND_BLOCKS, ids=[block[0] for block in COMMAND_BLOCKS])
def test_every_block_of_commands_runs_in_an_empty_folder(installed: Path, tmp_path: Path, block: list[str]) -> None:
    env = {**_clean_env(installed), "NO_COLOR": "1"}
    env.pop("DEEPSEEK_API_KEY", None)
    folder = tmp_path / "empty"
    folder.mkdir()
    commands = block if block[0] == "chunktape demo --out ." else ["chunktape demo --out .", *block]
    for line in commands:
        words = shlex.split(line)
        if words[1] in LIVE:
            words = [*words[:2], "--help"]
        done = subprocess.run(words, cwd=folder, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, line
        if words[-1] == "--help":
            assert "Example: chunktape " + words[1] in " ".join(done.stdout.split()), line
