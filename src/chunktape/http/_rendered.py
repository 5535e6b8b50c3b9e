"""What an HTTP face rendered of a recorded interaction, kept for the interaction's later plays.

A play with instant timing and no fault sends the same bytes every time (the interaction, the route's protocol, the
request's model and ``include_usage`` decide them), so ``ReplayTransport`` and the replay server render such a body
once and send the kept bytes on every later play (``--repeat``, ``allow_repeats``, many clients reading one
recorded stream). A play with a fault or with timing is rendered as it goes, as before. An entry is only used for
the very interaction it was rendered from (an opened cassette decodes each interaction once, so a later play meets
the same object); what is kept is capped in bytes, past which bodies are rendered again each time.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from chunktape._cassettes.model import Interaction

__all__ = ["KEPT_BYTES", "Rendered"]

T = TypeVar("T")

KEPT_BYTES = 64 << 20
"""How many bytes of rendered bodies one face keeps at most."""


class Rendered(Generic[T]):
    """Rendered values by (interaction index, key), each kept with the interaction it was rendered from."""

    __slots__ = ("_kept", "_size", "limit")

    def __init__(self, limit: int = KEPT_BYTES) -> None:
        self._kept: dict[tuple[int, Hashable], tuple[Interaction, T]] = {}
        self._size = 0
        self.limit = limit

    def get(self, index: int, interaction: Interaction, key: Hashable) -> T | None:
        """What was kept for ``interaction`` (at ``index``) under ``key``, or None."""
        kept = self._kept.get((index, key))
        if kept is None or kept[0] is not interaction:
            return None
        return kept[1]

    def put(self, index: int, interaction: Interaction, key: Hashable, value: T, size: int = 0) -> T:
        """Keep ``value`` (``size`` bytes) unless the cap is reached; returns it."""
        if self._size + size <= self.limit:
            old = self._kept.get((index, key))
            if old is None:
                self._size += size
            self._kept[(index, key)] = (interaction, value)
        return value
