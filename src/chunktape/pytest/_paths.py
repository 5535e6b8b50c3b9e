"""Which file a test's cassette is, and how a path is shown to the person running pytest."""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from pathlib import Path

import pytest

from chunktape._errors import ErrorCode, LlmError

__all__ = ["cassette_file_name", "checked_name", "shown", "test_name"]

_BAD_NAME = re.compile(r"[/\\\x00-\x1f\x7f]")
"""What a ``name=`` may not hold: a path separator would leave the cassette folder, a control character the
terminal; ``.``/``..`` and empty names are refused separately."""
_MAX_NAME = 100


def cassette_file_name(name: str) -> str:
    """A safe file name, ``.msgpack`` by default: other characters percent-encoded, long names shortened.

    Percent-encoding (``%`` included) keeps distinct names distinct (``a/b`` and ``a_b``, ``.x`` and ``x`` never
    share a file) and readable; a leading dot is encoded too, so no cassette is a hidden file.
    """
    if not name.endswith((".msgpack", ".json")):
        name += ".msgpack"
    stem, dot, suffix = name.rpartition(".")
    safe = urllib.parse.quote(stem, safe="[]")
    if safe.startswith("."):
        safe = "%2E" + safe[1:]
    if len(safe) > _MAX_NAME:
        digest = hashlib.sha256(stem.encode()).hexdigest()[:12]
        safe = f"{safe[: _MAX_NAME - 13]}-{digest}"
    return f"{safe}{dot}{suffix}"


def checked_name(name: object) -> str:
    """The marker's ``name=``, refused (failing only this test) if it could not name a file in the folder."""
    if not isinstance(name, str):
        raise LlmError(f"name= takes a str, got {type(name).__name__}", ErrorCode.INVALID_CONFIG)
    stem = name.rpartition(".")[0] if name.endswith((".msgpack", ".json")) else name
    problem = None
    if not stem.strip():
        problem = "is empty"
    elif stem.strip(".") == "":
        problem = "is only dots"
    elif _BAD_NAME.search(name):
        problem = "holds a path separator or a control character"
    if problem is not None:
        raise LlmError(
            f"name={name!r} {problem}; give a plain file name such as name='shared' (the cassette goes in tape_dir)",
            ErrorCode.INVALID_CONFIG,
        )
    return name


def test_name(item: pytest.Item, matrix_id: str | None) -> str:
    """``Class.test_name[param-id]``; the fault matrix's own id is left out, so its runs share one cassette."""
    parts = item.nodeid.split("::")[1:]
    last = parts[-1]
    if matrix_id is not None and last.endswith("]") and "[" in last:
        base, _, ident = last[:-1].partition("[")
        if ident == matrix_id:
            ident = ""
        elif ident.endswith(f"-{matrix_id}"):
            ident = ident[: -len(matrix_id) - 1]
        elif ident.startswith(f"{matrix_id}-"):
            ident = ident[len(matrix_id) + 1 :]
        last = f"{base}[{ident}]" if ident else base
    return ".".join([*parts[:-1], last])


def shown(config: pytest.Config, path: Path) -> str:
    """``path`` relative to the run's root folder when it is under it, else as it is."""
    try:
        return str(path.relative_to(config.rootpath))
    except ValueError:
        return str(path)
