"""A virtualenv where chunktape is installed as ``pip install`` leaves it, not editable: its site-packages holds a copy
of ``src/chunktape`` and a ``chunktape-<version>.dist-info`` with the real METADATA and entry points (the console
script included), and the installed dependencies are linked from this environment. No network, no pip, no build.

Only what the distribution ships is there: a file the package reads from the repository (``cassettes/``, ``docs/``)
is missing, as it would be for a pip user.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import venv
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

__all__ = ["installed_python"]

SOURCE = Path(__file__).resolve().parents[1] / "src" / "chunktape"
_SCRIPT = """#!{python}
import sys
from {module} import {function}
sys.exit({function}())
"""


def _closure(names: Iterable[str], extras: Iterable[str] = ()) -> list[metadata.Distribution]:
    """The installed distributions ``names`` need (chunktape's ``extras`` too), with what those need in turn."""
    wanted = {"", *extras}
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        dist = metadata.distribution(name)
        seen[name] = dist
        for line in dist.requires or ():
            requirement = Requirement(line)
            markers = wanted if name == "chunktape" else {""}
            if requirement.marker is None or any(requirement.marker.evaluate({"extra": e}) for e in markers):
                todo.append(requirement.name)
    return list(seen.values())


def _dist_info(site: Path) -> None:
    """chunktape's dist-info as a wheel install writes it: METADATA and entry points from the real build."""
    dist = metadata.distribution("chunktape")
    info = site / f"chunktape-{dist.version}.dist-info"
    info.mkdir()
    for name in ("METADATA", "entry_points.txt"):
        text = dist.read_text(name)
        assert text, f"the installed chunktape has no {name}"
        (info / name).write_text(text, encoding="utf-8")
    (info / "INSTALLER").write_text("tests/installed.py\n")
    (info / "top_level.txt").write_text("chunktape\n")
    files = sorted(str(path.relative_to(site)) for path in (site / "chunktape").rglob("*") if path.is_file())
    files += [
        f"{info.name}/{name}" for name in ("METADATA", "entry_points.txt", "INSTALLER", "top_level.txt", "RECORD")
    ]
    (info / "RECORD").write_text("".join(f"{name},,\n" for name in files))


def linked_python(folder: Path, names: Iterable[str], extras: Iterable[str] = (), skip: Iterable[str] = ()) -> Path:
    """A virtualenv at ``folder`` whose site-packages links the files of ``names``' installed closure (chunktape's
    ``extras`` too), but for the distributions ``skip``; its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    python = folder / "bin" / "python"
    site = _purelib(python)
    skipped = {name.lower() for name in skip}
    for dist in _closure(names, extras):
        if dist.metadata["Name"].lower() in skipped:
            continue
        base = Path(str(dist.locate_file("")))
        tops = {Path(str(file)).parts[0] for file in dist.files or () if not str(file).startswith("..")}
        for top in tops:
            target = site / top
            if not target.exists() and (base / top).exists():
                target.symlink_to(base / top)
    return python


def _purelib(python: Path) -> Path:
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip())


def installed_python(folder: Path, extras: Iterable[str] = (), also: Iterable[str] = ()) -> Path:
    """A virtualenv at ``folder`` with chunktape (and its ``extras``) installed non-editable, plus the installed
    distributions ``also`` (``openai``...); its python. Its ``bin/`` holds chunktape's console script."""
    python = linked_python(folder, ["chunktape", *also], extras, skip=["chunktape"])
    site = _purelib(python)
    shutil.copytree(SOURCE, site / "chunktape", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _dist_info(site)
    entry_points = metadata.distribution("chunktape").entry_points
    for entry in entry_points.select(group="console_scripts"):
        module, _, function = entry.value.partition(":")
        script = folder / "bin" / entry.name
        script.write_text(_SCRIPT.format(python=python, module=module, function=function))
        script.chmod(0o755)
    return python
