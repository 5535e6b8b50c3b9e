"""``FaultTransport``: the fault catalogue applied to HTTP traffic, as an ``httpx.AsyncBaseTransport``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from chunktape.faults import Fault
from chunktape.replayer.injection import FaultPlan

__all__ = ["FaultTransport"]


class FaultTransport(httpx.AsyncBaseTransport):
    """Wraps ``inner`` and injects faults into its responses (implementation follows)."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        faults: Iterable[Fault | str | Mapping[str, Any]] = (),
        *,
        dribble: int | None = None,
    ) -> None:
        self.inner = inner
        self.plan = FaultPlan(faults)
        self.dribble = dribble
        self.injected: list[str | None] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()
