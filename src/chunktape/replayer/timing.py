"""When replayed chunks are released: at once, on the recorded clock (scaled), or at a fixed pace."""

from __future__ import annotations

from typing import Literal

import msgspec

from chunktape.cassettes.model import Interaction
from chunktape.errors import ErrorCode, LlmError

__all__ = ["Timing"]


class Timing(msgspec.Struct, frozen=True, kw_only=True):
    """A replay pace; a Struct so it can live in pytest markers and scenario files.

    Build one with ``Timing.instant()``, ``Timing.recorded(speed)`` or ``Timing.fixed(first_chunk_s, between_s)``.
    """

    kind: Literal["instant", "recorded", "fixed"] = "instant"
    speed: float = 1.0
    """For ``recorded``: 2.0 replays twice as fast, 0.5 at half speed."""
    first_chunk_s: float = 0.0
    between_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.speed > 0:
            raise LlmError(f"Timing speed must be > 0, got {self.speed}", ErrorCode.INVALID_CONFIG)
        if self.first_chunk_s < 0 or self.between_s < 0:
            raise LlmError("Timing delays must be >= 0", ErrorCode.INVALID_CONFIG)

    @classmethod
    def instant(cls) -> Timing:
        """No waiting at all: the fastest replay, for logic tests."""
        return cls(kind="instant")

    @classmethod
    def recorded(cls, speed: float = 1.0) -> Timing:
        """The recorded time to first chunk and gaps, divided by ``speed``."""
        return cls(kind="recorded", speed=speed)

    @classmethod
    def fixed(cls, first_chunk_s: float, between_s: float) -> Timing:
        """The first chunk after ``first_chunk_s``, then one every ``between_s``."""
        return cls(kind="fixed", first_chunk_s=first_chunk_s, between_s=between_s)

    @property
    def is_instant(self) -> bool:
        return self.kind == "instant"

    def offsets(self, interaction: Interaction) -> list[float]:
        """Seconds after the ``stream()`` call at which each event, then the outcome, is due."""
        events = interaction.events
        if self.kind == "recorded":
            scale = 1e-9 / self.speed
            due = [event.t_ns * scale for event in events]
            due.append(max(interaction.outcome.t_ns * scale, due[-1] if due else 0.0))
            return due
        if self.kind == "fixed":
            due = [self.first_chunk_s + position * self.between_s for position in range(len(events))]
            due.append(due[-1] if due else 0.0)
            return due
        return [0.0] * (len(events) + 1)
