"""When replayed chunks are released: at once, on the recorded clock (scaled), or at a fixed pace.

One ``Timing`` for every face: the replayer, the pytest marker, scenario files and ``GET /scenarios``. It sits
on the floor of the cassette model (it reads an interaction's offsets), below the scenarios and the replayer.
"""

from __future__ import annotations

import warnings
from typing import Annotated, Literal

import msgspec

from chunktape._cassettes.model import MAX_GAP_NS, Interaction
from chunktape._errors import ErrorCode, LlmError

__all__ = ["SleepCappedWarning", "Timing"]

_MAX_SLEEP_S = MAX_GAP_NS / 1e9


class SleepCappedWarning(UserWarning):
    """A recorded-timing replay met a recorded wait longer than ``MAX_GAP_NS`` (one hour) and replayed it as that
    bound instead (divided by the speed, as every wait is).

    Such a gap is not a real stream's (``chunktape check`` flags it): sleeping it would hang the replay.
    """


class Timing(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename={"kind": "mode"}):
    """A replay pace; a Struct so it can live in pytest markers and scenario files.

    Build one with ``Timing.instant()``, ``Timing.recorded(speed)`` or ``Timing.fixed(first_chunk_s, between_s)``.
    The attribute ``kind`` is written ``mode`` in files and JSON (``timing = { mode = "recorded", speed = 2.0 }``),
    the name scenario files have always used.
    """

    kind: Literal["instant", "recorded", "fixed"] = "instant"
    speed: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    """For ``recorded``: 2.0 replays twice as fast, 0.5 at half speed."""
    first_chunk_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    between_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0

    def __post_init__(self) -> None:
        # The Meta bounds hold for decoded Timings (with the field's path in the error); these, for constructed ones.
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
            # The bound is on what was recorded (no real stream waits an hour), then the speed scales it: at
            # speed 3600, an absurd recorded wait replays in one second.
            due = [event.t_ns * 1e-9 for event in events]
            due.append(max(interaction.outcome.t_ns * 1e-9, due[-1] if due else 0.0))
            return [offset / self.speed for offset in _capped(due)]
        if self.kind == "fixed":
            due = [self.first_chunk_s + position * self.between_s for position in range(len(events))]
            due.append(due[-1] if due else 0.0)
            return due
        return [0.0] * (len(events) + 1)


def _capped(due: list[float]) -> list[float]:
    """``due`` with no single wait (from the call or from the latest offset reached) over ``MAX_GAP_NS``: each
    longer wait is shortened to it, and everything after moves earlier by as much. Warns once per call."""
    if not due or max(due) <= _MAX_SLEEP_S:
        return due
    capped: list[float] = []
    reached = cut = longest = 0.0
    shortened = 0
    for offset in due:
        wait = offset - reached
        if wait > _MAX_SLEEP_S:
            shortened += 1
            longest = max(longest, wait)
            cut += wait - _MAX_SLEEP_S
        capped.append(offset - cut)
        reached = max(reached, offset)
    if shortened:
        warnings.warn(
            f"the recording waits {longest:.3g} s at once ({shortened} wait(s) over the {_MAX_SLEEP_S:.0f} s "
            f"bound); each was replayed as {_MAX_SLEEP_S:.0f} s. `chunktape check` flags such a cassette",
            SleepCappedWarning,
            stacklevel=3,
        )
    return capped
