"""The cassette file rooms: formats and lazy decoding (``codec``), writing files (``store``), the crash journal
(``journal``); data flows one way, codec <- store <- journal, and each job has one home."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from chunktape.cassettes import codec, journal, store
from test_wire_layout import _imports

CASSETTES = Path(__file__).resolve().parents[1] / "src" / "chunktape" / "cassettes"


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("codec", {"chunktape.cassettes.store", "chunktape.cassettes.journal"}),
        ("store", {"chunktape.cassettes.journal"}),
        ("journal", set()),
    ],
)
def test_codec_store_and_journal_import_only_downward(module: str, forbidden: set[str]) -> None:
    imported = _imports(CASSETTES / f"{module}.py")
    assert not imported & forbidden, f"{module}.py imports {sorted(imported & forbidden)}"


@pytest.mark.parametrize(
    ("module", "names"),
    [
        (codec, ["LazyCassette", "as_lazy", "as_cassette", "open_cassette", "load_cassette", "encode_cassette"]),
        (store, ["save_cassette", "save_new", "append_interactions", "cassette_lock", "temp_path", "failed_path"]),
        (journal, ["Journal", "recover", "journal_path", "held_journal", "live_journal", "recovered_path"]),
    ],
)
def test_each_job_has_one_home(module: ModuleType, names: list[str]) -> None:
    for name in names:
        assert getattr(module, name).__module__ == module.__name__
        for other in {codec, store, journal} - {module}:
            assert name not in vars(other)["__all__"], f"{other.__name__} exports {name} too"
