"""render_sse: recorded interactions as OpenAI SSE that OpenAICompatAdapter parses back to ``==`` chunks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunktape import (
    Cancelled,
    Completed,
    ErrorCode,
    GenerateOptions,
    LlmError,
    Message,
    Raised,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    load_cassette,
)
from chunktape._cassettes.model import ResponseMeta
from chunktape.http import render_sse
from chunktape.http._render import SseRenderer
from chunktape.providers import OpenAICompatAdapter
from chunktape.wire._sse import SseEvent, parse_sse
from helpers import drain, interaction_of, recorded_request, run_sync, text_stream
from strategies import wire_streams

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "cassettes").glob("*.json"))
REQUEST = recorded_request("hi", model="m")


async def parse_with_adapter(body: bytes, model: str = "m") -> tuple[list[StreamChunk], LlmError | None]:
    """What OpenAICompatAdapter makes of ``body`` served as an event stream."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatAdapter("http://127.0.0.1:9", api_key="k", client=client)
        options = GenerateOptions(model=model, messages=[Message(role="user", content="hi")])
        return await drain(adapter.stream(options))


def test_there_are_example_cassettes() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.stem)
async def test_every_example_cassette_round_trips(path: Path) -> None:
    for recorded in load_cassette(path).interactions:
        chunks, error = await parse_with_adapter(render_sse(recorded))
        outcome = recorded.outcome
        if isinstance(outcome, Completed):
            assert error is None
            assert chunks == recorded.chunks
        elif isinstance(outcome, Raised):
            assert error is not None
            assert chunks == recorded.chunks
            assert error.code == outcome.code
            assert error.status == outcome.status
        else:
            assert isinstance(outcome, Cancelled)
            assert error is not None
            assert error.code is ErrorCode.STREAM_ABORTED
            assert chunks == recorded.chunks[: len(chunks)]


@settings(max_examples=60, deadline=None)
@given(chunks=wire_streams())
def test_valid_streams_round_trip(chunks: list[StreamChunk]) -> None:
    decoded, error = run_sync(parse_with_adapter(render_sse(interaction_of(chunks, request=REQUEST))))
    assert error is None
    assert decoded == chunks


def test_the_body_looks_like_openai() -> None:
    body = render_sse(interaction_of(text_stream("Hel", "lo"), request=REQUEST), model="gpt-x")
    items = parse_sse(body)
    assert all(isinstance(item, SseEvent) for item in items)
    assert items[-1] == SseEvent(data="[DONE]")
    assert b'"object":"chat.completion.chunk"' in body
    assert b'"model":"gpt-x"' in body
    assert b'"choices":[],"usage"' in body


@pytest.mark.parametrize(
    ("outcome", "code", "status"),
    [
        (
            Raised(t_ns=9, code="PROVIDER_HTTP_ERROR", message="Token limit reached", status=400),
            "PROVIDER_HTTP_ERROR",
            400,
        ),
        (Raised(t_ns=9, code="STREAM_ABORTED", message="peer closed the connection"), "STREAM_ABORTED", None),
        (Raised(t_ns=9, code="INVALID_RESPONSE", message="garbage"), "INVALID_RESPONSE", None),
        (Cancelled(t_ns=9), "STREAM_ABORTED", None),
    ],
    ids=["in-band-http-error", "aborted", "invalid", "cut-short"],
)
async def test_outcomes_mid_stream(outcome: Any, code: str, status: int | None) -> None:
    prefix = text_stream("Hel", "lo")[:2]
    chunks, error = await parse_with_adapter(render_sse(interaction_of(prefix, outcome, request=REQUEST)))
    assert chunks == prefix
    assert error is not None
    assert (error.code, error.status) == (code, status)
    if isinstance(outcome, Raised) and outcome.code == "PROVIDER_HTTP_ERROR":
        assert "Token limit reached" in error.message
    if isinstance(outcome, Cancelled):
        assert b"[DONE]" not in render_sse(interaction_of(prefix, outcome, request=REQUEST))


# -- Retry-After: robust headers, and carried in the body ------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), -1.0])
def test_error_headers_skip_a_retry_after_that_is_not_a_finite_non_negative_number(value: float) -> None:
    from chunktape.http._render import error_body, error_headers

    assert error_headers(value) == {}
    assert "retry_after" not in error_body("slow down", status=429, retry_after=value)["error"]


def test_error_headers_cap_a_huge_retry_after_and_the_body_carries_it() -> None:
    from chunktape.http._render import error_body, error_headers
    from chunktape.wire._http_errors import MAX_RETRY_AFTER

    assert error_headers(1e300) == {
        "retry-after": str(int(MAX_RETRY_AFTER)),
        "retry-after-ms": str(int(MAX_RETRY_AFTER * 1000)),
    }
    assert error_headers(1.5) == {"retry-after": "2", "retry-after-ms": "1500"}
    assert error_body("slow down", status=429, retry_after=1.5)["error"]["retry_after"] == 1.5
    assert "retry_after" not in error_body("slow down", status=429)["error"]


def test_an_in_band_error_event_carries_retry_after() -> None:
    raised = Raised(t_ns=1, code="PROVIDER_HTTP_ERROR", message="slow down", status=429, retry_after=2.5)
    body = render_sse(interaction_of(text_stream("Hi")[:2], raised, request=REQUEST))
    events = [item for item in parse_sse(body) if isinstance(item, SseEvent)]
    assert events[-1].data is not None
    assert '"retry_after":2.5' in events[-1].data


_METAS = [
    None,
    ResponseMeta(id="chatcmpl-9", model="gpt-x", created=17, system_fingerprint="fp_1"),
    ResponseMeta(
        id="gen-1",
        extras={"delta": {"provider": "p", "usage": None}, "delta.choice": {"native": "x"}, "delta.delta": {"r": 1}},
    ),
    # The recorded delta carries the text field itself: no template, every event rendered whole.
    ResponseMeta(extras={"delta.delta": {"content": "as sent", "reasoning_content": "as sent"}}),
]


@settings(max_examples=200)
@given(text=st.text(), reasoning=st.booleans(), meta=st.sampled_from(_METAS))
def test_a_delta_rendered_from_its_template_is_the_event_rendered_whole(
    text: str, reasoning: bool, meta: ResponseMeta | None
) -> None:
    chunk: StreamChunk = ReasoningDelta(index=0, text=text) if reasoning else TextDelta(index=0, text=text)
    renderer = SseRenderer(model="m", meta=meta)
    renderer.chunk(chunk)  # the first builds the template, the second uses it
    assert renderer.chunk(chunk) == SseRenderer(model="m", meta=meta)._render(chunk)


def test_a_text_that_spells_the_template_stand_in_is_rendered_as_itself() -> None:
    stand_in = "\x00chunktape-text\x01"
    renderer = SseRenderer(model="m")
    body = renderer.chunk(TextDelta(index=0, text=stand_in)) + renderer.chunk(TextDelta(index=0, text="ok"))
    events = [event for event in parse_sse(body) if isinstance(event, SseEvent)]
    assert [json.loads(event.data or "")["choices"][0]["delta"]["content"] for event in events] == [stand_in, "ok"]
