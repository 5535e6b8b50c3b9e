"""``ReplayAdapter``: the chunk-stream face of the replay engine (``Playback``); never the network."""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Sequence
from typing import Unpack

from chunktape._cassettes.codec import LazyCassette
from chunktape._cassettes.matching import RequestMatcher
from chunktape._cassettes.model import Cassette, RecordedRequest
from chunktape._errors import LIBRARY_ADVICE, Advice
from chunktape._protocol import GenerateOptions, LlmAdapter, ReasoningOption, StreamChunk
from chunktape._replayer.options import ReplayKeywords, ReplayOptions
from chunktape._replayer.playback import Hold, Playback, ReplayCall
from chunktape.faults._plan import FaultPlan

__all__ = ["Hold", "ReplayAdapter", "ReplayCall"]


class ReplayAdapter(LlmAdapter):
    """An adapter that answers each request with the first unplayed recorded interaction that matches.

    Identical requests replay in recorded order (so a recorded 429, 429, success retry replays as such); a
    played interaction is used up unless ``allow_repeats``. Recorded errors are raised at the same position,
    recordings that were cut short raise ``CASSETTE_EXHAUSTED`` when read past their end. The matching, counts
    and playing are its ``playback``'s (``chunktape._replayer.Playback``), which the members below show.
    """

    def __init__(
        self,
        cassette: Cassette | LazyCassette | str | os.PathLike[str],
        *,
        replay_options: ReplayOptions | None = None,
        name: str | None = None,
        **replay: Unpack[ReplayKeywords],
    ) -> None:
        self.playback = Playback(cassette, ReplayOptions.of(replay_options, **replay))
        """The engine: matching, play counts, faults and timing."""
        self._name = name or self.playback.recorded_name

    @property
    def name(self) -> str:
        return self._name

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        """The efforts the recorded adapter offered (from the cassette's meta)."""
        return self.playback.source.meta.reasoning_options

    @property
    def cassette(self) -> Cassette:
        return self.playback.source.to_cassette()

    def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        # The call's own generator, not a wrapper around it: one generator frame per chunk on the hot path.
        return self.playback.open(options).chunks

    # -- the engine's state and steps, as this adapter's ------------------------------------------

    @property
    def replay_options(self) -> ReplayOptions:
        """How this adapter replays (``replay_options`` with the keywords applied); validated when built."""
        return self.playback.replay_options

    @property
    def source(self) -> LazyCassette:
        return self.playback.source

    @property
    def path(self) -> str | None:
        return self.playback.path

    @property
    def fault_plan(self) -> FaultPlan:
        """The faults applied at replay time, with their per-call state (FailFirst counters, Chaos draws)."""
        return self.playback.fault_plan

    @property
    def injected(self) -> list[str | None]:
        """Per ``stream()`` call, the id of the fault injected into it, or None."""
        return self.playback.injected

    @property
    def matcher(self) -> RequestMatcher:
        return self.playback.matcher

    @property
    def play_counts(self) -> list[int]:
        """How often each recorded interaction was played."""
        return self.playback.play_counts

    @property
    def calls(self) -> int:
        """How many ``stream()`` calls were made."""
        return self.playback.calls

    def select(self, request: RecordedRequest) -> int:
        """``Playback.select``: the interaction that would answer ``request`` now, or the miss."""
        return self.playback.select(request)

    def can_play(self, options: GenerateOptions | RecordedRequest) -> bool:
        """``Playback.can_play``: whether a ``stream(options)`` call now would replay something."""
        return self.playback.can_play(options)

    def unplayed(self) -> list[int]:
        return self.playback.unplayed()

    def assert_all_played(self, *, advice: str = LIBRARY_ADVICE[Advice.UNPLAYED]) -> None:
        """``Playback.assert_all_played``: fail if a recorded interaction was never played."""
        self.playback.assert_all_played(advice=advice)

    def open(self, options: GenerateOptions, *, request: RecordedRequest | None = None) -> ReplayCall:
        """``Playback.open``: start one ``stream()`` call now, with its number and fault."""
        return self.playback.open(options, request=request)

    def reserve(self, request: RecordedRequest) -> int:
        """``Playback.reserve``: hold the interaction that answers ``request`` now."""
        return self.playback.reserve(request)

    def release(self, index: int) -> None:
        """``Playback.release``: give back an interaction a call held without using it up."""
        self.playback.release(index)
