"""One missing cassette, one error: which test of the run reports a cassette that does not exist.

The first test that fails for want of a cassette says so, with the command that records it; every later test of
the run that needs the same cassette is skipped before it runs, its reason naming that first test (pytest folds
equal skip reasons into one line of its summary). A fault matrix's fault runs never claim their cassette while
their ``[no-fault]`` run is part of the session: that run is the one that records it, so it is the one that says so.

Under pytest-xdist the workers of one run share the claims through files in a folder of the run (``MissingCassettes``
with a folder); alone, a dict is enough.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

__all__ = ["MissingCassettes"]


class MissingCassettes:
    """The missing cassettes of one run, each with the node id of the first test that reported it."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self._claims: dict[str, str] = {}

    def _key(self, path: Path) -> str:
        return str(Path(os.path.abspath(path)))

    def _file(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / f"missing-{hashlib.sha256(key.encode()).hexdigest()[:24]}"

    def first(self, path: Path) -> str | None:
        """The node id of the test that reported ``path`` missing in this run, or None if none has yet."""
        key = self._key(path)
        if self.folder is None:
            return self._claims.get(key)
        try:
            return self._file(key).read_text(encoding="utf-8") or None
        except FileNotFoundError:
            return None

    def claim(self, path: Path, nodeid: str) -> str:
        """Report ``path`` missing for ``nodeid``: the node id of the first test that did (``nodeid`` if it is)."""
        key = self._key(path)
        if self.folder is None:
            return self._claims.setdefault(key, nodeid)
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self._file(key)
        # Written aside, then linked into place: the link is atomic and fails if another worker claimed first, so
        # the claim is never seen half written.
        handle, written = tempfile.mkstemp(dir=self.folder, prefix=".claim-")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(nodeid)
            try:
                os.link(written, target)
            except FileExistsError:
                return target.read_text(encoding="utf-8")
            return nodeid
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(written)
