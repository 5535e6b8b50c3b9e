"""HTTP path (DESIGN §13, issue 8): chunks/s through ``OpenAICompatAdapter`` vs the ``openai`` SDK, both
consuming the loopback replay server (``chunktape serve``) on 127.0.0.1.

HOOK for the HTTP layer: until ``chunktape.http`` (server) and ``chunktape.providers.OpenAICompatAdapter``
exist this prints a "pending" row. To wire it, implement ``measure(quick)`` below: serve one recorded
cassette from ``bench_core.build_files`` on 127.0.0.1, drain it ``repeat`` times through each client, and
return (adapter chunks/s, openai SDK chunks/s). The row's target is the adapter at least as fast as the SDK.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_core import Row, print_table

NAME = "HTTP path: chunks/s, OpenAICompatAdapter vs openai SDK (loopback server)"


def available() -> bool:
    """Whether the HTTP layer this row measures has landed."""
    try:
        return importlib.util.find_spec("chunktape.http") is not None
    except ImportError:
        return False


def measure(quick: bool) -> tuple[float, float] | None:
    """(OpenAICompatAdapter chunks/s, openai SDK chunks/s) against the loopback server; None: not wired yet."""
    return None


def main(quick: bool = False) -> list[Row]:
    if not available():
        return [Row(NAME, "-", ">= 1x", None, "pending: chunktape.http is not importable yet")]
    figures = measure(quick)
    if figures is None:
        return [Row(NAME, "-", ">= 1x", None, "pending: chunktape.http exists; wire measure() in bench_http.py")]
    adapter, sdk = figures
    ratio = adapter / sdk
    return [Row(NAME, f"{ratio:.2f}x", ">= 1x", ratio >= 1, f"adapter {adapter:,.0f} chunks/s, SDK {sdk:,.0f}")]


if __name__ == "__main__":
    print_table(main(quick="--quick" in sys.argv))
