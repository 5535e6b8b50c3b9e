"""The peers the table compares against, installed at bench time, each in its own folder, used only in processes of
its own.

cassetter and pytest-recording both register a ``--record-mode`` pytest option, so the two can never load into one
pytest process, and neither may load into chunktape's own suite. Each is ``pip install --no-deps --target``-ed into
``benchmarks/.work/<name>`` (ignored by git; never the virtualenv, whose other packages, httpx2, vcrpy and pytest,
are their dependencies) at a pinned version, and put on the ``PYTHONPATH`` of the child processes that measure it,
never on this process's ``sys.path``: ``env(peer)`` is such a process's environment, holding that one peer's folder
and no other. ``ensure`` checks, in a child process with that environment, that the pinned version imports from its
folder and that the pytest plugins such a process sees are its own and not the other peer's. aimock (Node) is
``npm install``-ed into ``benchmarks/.work/aimock``. ``--quick``/``--smoke`` install nothing: a peer that is not
there already is "peer unavailable".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

WORK = Path(__file__).parent / ".work"


@dataclass(frozen=True)
class PipPeer:
    """A Python peer: its distribution, pinned version, import name, its pytest plugin's entry point name."""

    package: str
    version: str
    module: str
    plugin: str

    @property
    def folder(self) -> Path:
        return WORK / self.package


CASSETTER = PipPeer("cassetter", "0.16.1", "cassetter", "cassetter")
PYTEST_RECORDING = PipPeer("pytest-recording", "0.15.0", "pytest_recording", "recording")
PIP_PEERS = (CASSETTER, PYTEST_RECORDING)

AIMOCK_PACKAGE = "@copilotkit/aimock"
AIMOCK_VERSION = "1.43.0"
AIMOCK_DIR = WORK / "aimock"
AIMOCK_CLI = AIMOCK_DIR / "node_modules" / "@copilotkit" / "aimock" / "dist" / "cli.js"


def env(peer: PipPeer | None = None) -> dict[str, str]:
    """The environment of a child process that measures ``peer`` (its folder alone on ``PYTHONPATH``), or, with
    None, of one that measures chunktape alone (no peer anywhere on its path)."""
    base = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    if peer is not None:
        base["PYTHONPATH"] = str(peer.folder)
    return base


_PIP = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]

_PROBE = """
import importlib, importlib.metadata as metadata, json, sys
module = importlib.import_module(sys.argv[1])
plugins = sorted(entry.name for entry in metadata.entry_points(group="pytest11"))
print(json.dumps({"file": module.__file__, "version": metadata.version(sys.argv[2]), "plugins": plugins}))
"""


def _probe(peer: PipPeer) -> str | None:
    """Why ``peer`` is not usable as installed (None: it is): checked in a process with ``env(peer)``."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, peer.module, peer.package], capture_output=True, text=True, env=env(peer)
    )
    if done.returncode != 0:
        return f"{peer.package} does not import from {peer.folder}: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
    found = json.loads(done.stdout)
    if not str(found["file"]).startswith(str(peer.folder)):
        return f"{peer.package} imports from {found['file']}, not from {peer.folder}"
    if found["version"] != peer.version:
        return f"{peer.package} {found['version']} in {peer.folder}, not the pinned {peer.version}"
    others = [other.plugin for other in PIP_PEERS if other is not peer and other.plugin in found["plugins"]]
    if peer.plugin not in found["plugins"] or others:
        return f"a process for {peer.package} sees the pytest plugins {found['plugins']}"
    return None


def ensure(peer: PipPeer, install: bool = True) -> str | None:
    """Make ``peer`` usable (pip-installing its pinned version into its folder first if ``install`` and it is not
    there); returns why it is unavailable, or None."""
    if _probe(peer) is None:
        return None
    if not install:
        return f"{peer.package} {peer.version} not installed in {peer.folder} (--quick installs nothing)"
    shutil.rmtree(peer.folder, ignore_errors=True)
    done = subprocess.run(
        [*_PIP, "--target", str(peer.folder), f"{peer.package}=={peer.version}"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"pip install {peer.package}=={peer.version} failed: {last}"
    return _probe(peer)


def chunktape_alone() -> str | None:
    """Why this process's own environment is not peer-free (None: it is): no peer importable here, so chunktape's
    side of a row never runs beside a peer's code or plugins."""
    import importlib.util

    found = [peer.package for peer in PIP_PEERS if importlib.util.find_spec(peer.module) is not None]
    return f"{', '.join(found)} importable in the bench's own process" if found else None


def ensure_aimock(install: bool = True) -> str | None:
    """Install aimock (pinned) into ``AIMOCK_DIR`` once; returns why it is unavailable, or None."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        return "node/npm not found"
    package = AIMOCK_CLI.parent.parent / "package.json"
    if AIMOCK_CLI.is_file() and json.loads(package.read_text()).get("version") == AIMOCK_VERSION:
        return None
    if not install:
        return f"aimock {AIMOCK_VERSION} not installed in {AIMOCK_DIR} (--quick installs nothing)"
    AIMOCK_DIR.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            "npm",
            "install",
            "--no-audit",
            "--no-fund",
            "--prefix",
            str(AIMOCK_DIR),
            f"{AIMOCK_PACKAGE}@{AIMOCK_VERSION}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0 or not AIMOCK_CLI.is_file():
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"npm install {AIMOCK_PACKAGE}@{AIMOCK_VERSION} failed: {last[0]}"
    return None
