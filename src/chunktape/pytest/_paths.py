"""Which file a test's cassette is, and how a path is shown to the person running pytest."""

from __future__ import annotations

import hashlib
import os
import re
import urllib.parse
from pathlib import Path

import pytest

from chunktape._errors import ErrorCode, LlmError

__all__ = ["cassette_file_name", "checked_name", "named_cassette", "shown", "test_name"]

_BAD_NAME = re.compile(r"[\\\x00-\x1f\x7f]")
"""What a ``name=`` may not hold: a backslash (a separator on one system, a character on another: write ``/``), a
control character (the terminal); empty, ``.`` and misplaced ``..`` segments are refused separately."""
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
    """The marker's ``name=``, refused (failing only this test) if it could not name a cassette file.

    A plain name is a file in ``tape_dir``; a name with ``/`` is a path from ``tape_dir`` (leading ``..`` segments
    step out of the module's folder: ``../shared`` is ``cassettes/shared.msgpack`` next to the test files, for every
    test file there), or an absolute path. Either way its last segment is a file name as a plain name is."""
    if not isinstance(name, str):
        raise LlmError(f"name= takes a str, got {type(name).__name__}", ErrorCode.INVALID_CONFIG)
    problem = None
    if _BAD_NAME.search(name):
        problem = "holds a backslash or a control character"
    else:
        *folders, last = name.split("/")
        stem = last.rpartition(".")[0] if last.endswith((".msgpack", ".json")) else last
        if folders and folders[0] == "" and os.path.isabs(name):
            folders = folders[1:]  # an absolute path
        ups = len(folders) - len(list(_after_ups(folders)))
        if not stem.strip():
            problem = "is empty" if not folders else "ends in an empty file name"
        elif stem.strip(".") == "":
            problem = "is only dots" if not folders else "ends in a file name that is only dots"
        elif any(segment in ("", ".") for segment in folders):
            problem = "holds an empty or '.' folder"
        elif ".." in folders[ups:]:
            problem = "holds '..' after a folder name (only leading '..' segments step out of tape_dir)"
    if problem is not None:
        raise LlmError(
            f"name={name!r} {problem}; give a file name such as name='shared' (a file in tape_dir), or a path with / "
            "such as name='../shared' (from tape_dir)",
            ErrorCode.INVALID_CONFIG,
        )
    return name


def _after_ups(folders: list[str]) -> list[str]:
    """``folders`` after its leading ``..`` segments."""
    index = 0
    while index < len(folders) and folders[index] == "..":
        index += 1
    return folders[index:]


def named_cassette(tape_dir: Path, name: str) -> Path:
    """The cassette a ``checked_name`` names: a file in ``tape_dir``, or the path from it (normalised, so a ``..``
    never needs the module's folder to exist), or an absolute path."""
    folder, separator, last = name.rpartition("/")
    relative = Path(folder or "/") / cassette_file_name(last) if separator else Path(cassette_file_name(last))
    return Path(os.path.normpath(tape_dir / relative))


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
