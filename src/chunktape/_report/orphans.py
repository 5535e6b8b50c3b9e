"""Orphans: the cassette files under the tape folders that no test uses (``pytest --tape-prune``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from chunktape._report.analysis import find_cassette_files

__all__ = ["is_kept_aside", "orphans"]

_KEPT_ASIDE: Final = re.compile(r"\.failed(-\d+)?\.(msgpack|json)$")


def is_kept_aside(path: Path) -> bool:
    """Whether ``path`` is a recording kept beside its cassette (``<name>.failed.msgpack``), not a cassette."""
    return _KEPT_ASIDE.search(path.name) is not None


def orphans(roots: Iterable[Path], used: Iterable[Path]) -> list[Path]:
    """The cassette files under ``roots`` (recursively) that are not in ``used``, sorted; recordings kept aside
    (``*.failed.msgpack``) and JSON files that are not cassettes are left out."""
    taken = {path.resolve() for path in used}
    existing = [root for root in dict.fromkeys(path.resolve() for path in roots) if root.is_dir()]
    found = find_cassette_files(existing).files
    return sorted(path for path in found if path.resolve() not in taken and not is_kept_aside(path))
