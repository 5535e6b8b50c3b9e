"""Nothing a provider sent is dropped without a word: each provider field the chunk protocol has no slot for is kept
(and sent back by ``serve``) or named in the import's output; and ``serve`` gives back the recorded metadata (id,
answered model, created, system_fingerprint, service_tier, request-id / rate-limit headers) for every way of
recording: ``RecordingTransport``, the proxy, ``chunktape record`` and ``import-vcr``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
import yaml
from typer.testing import CliRunner

from chunktape import load_cassette
from chunktape.cli import app
from chunktape.http import RecordingTransport, ReplayServer
from chunktape.http._server.proxy import RecordingProxy
from chunktape.http._vcr import read_vcr
from fake_provider import FakeProvider, FakeResponse, chunk, sse

ROLE: dict[str, Any] = {"role": "assistant", "content": ""}


def _choice(delta: dict[str, Any], finish_reason: str | None = None, **fields: Any) -> dict[str, Any]:
    """A chunk whose first choice carries ``fields`` beside its delta."""
    event = chunk(delta, finish_reason=finish_reason)
    event["choices"][0].update(fields)
    return event


def _events(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.split(b"\n\n") if line.startswith(b"data: {")]


def _vcr(path: Path, body: bytes, headers: dict[str, str] | None = None) -> Path:
    request = {
        "body": json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}),
        "headers": {},
        "method": "POST",
        "uri": "https://api.example.com/v1/chat/completions",
    }
    response = {
        "body": {"string": body.decode()},
        "headers": {"content-type": ["text/event-stream"], **{k: [v] for k, v in (headers or {}).items()}},
        "status": {"code": 200, "message": "OK"},
    }
    path.write_text(yaml.safe_dump({"interactions": [{"request": request, "response": response}], "version": 1}))
    return path


def _served(path: Path, model: str = "m") -> tuple[list[dict[str, Any]], httpx2.Headers]:
    """The cassette's one interaction as ``serve`` streams it (with ``include_usage``)."""
    question: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    question["stream_options"] = {"include_usage": True}
    with ReplayServer(path) as server:
        reply = httpx2.post(f"{server.url}/v1/chat/completions", json=question)
    return _events(reply.content), reply.headers


# -- one body per provider field -------------------------------------------------------------------------------

FIELDS: dict[str, bytes] = {
    "moderation": sse(
        chunk(ROLE),
        chunk({"content": "Hi"}),
        chunk({}, finish_reason="stop", moderation={"flagged": False, "categories": {}}),
    ),
    "prompt_filter_results": sse(
        {
            "id": "",
            "object": "",
            "created": 0,
            "model": "",
            "choices": [],
            "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {"hate": {"filtered": False}}}],
        },
        chunk(ROLE),
        chunk({"content": "Hi"}),
        chunk({}, finish_reason="stop"),
    ),
    "content_filter_results": sse(
        chunk(ROLE),
        _choice({"content": "Hi"}, content_filter_results={"hate": {"filtered": False, "severity": "safe"}}),
        _choice({}, "stop", content_filter_results={}),
    ),
    "reasoning_details": sse(
        chunk(ROLE),
        chunk({"reasoning": "Think", "reasoning_details": [{"type": "reasoning.text", "text": "Think"}]}),
        chunk({"reasoning": "ing", "reasoning_details": [{"type": "reasoning.text", "text": "ing"}]}),
        chunk({"content": "Hi"}),
        chunk({}, finish_reason="stop"),
    ),
    "provider": sse(
        chunk(ROLE, provider="Fireworks"),
        chunk({"content": "Hi"}, provider="Fireworks"),
        chunk({}, finish_reason="stop", provider="Fireworks"),
    ),
    "native_finish_reason": sse(
        _choice(ROLE, native_finish_reason=None),
        _choice({"content": "Hi"}, native_finish_reason=None),
        _choice({}, "stop", native_finish_reason="end_turn"),
    ),
    "service_tier": sse(
        chunk(ROLE, service_tier="default"),
        chunk({"content": "Hi"}, service_tier="default"),
        chunk({}, finish_reason="stop", service_tier="default"),
    ),
    "x_groq": sse(
        chunk(ROLE, x_groq={"id": "req_01"}),
        chunk({"content": "Hi"}),
        chunk({}, finish_reason="stop", x_groq={"usage": {"prompt_tokens": 5, "completion_tokens": 1}}),
    ),
    "token_ids": sse(
        chunk(ROLE),
        _choice({"content": "Hi"}, token_ids=[13347]),
        _choice({"content": " there"}, token_ids=[1070]),
        chunk({}, finish_reason="stop"),
    ),
}
"""Where each provider puts it: OpenAI's ``moderation``, Azure's filters, OpenRouter's reasoning details, routing
provider and native finish reason, ``service_tier``, Groq's ``x_groq``, and per-token ids (vLLM's ``token_ids``)."""
CHOICE_FIELDS = {"content_filter_results", "native_finish_reason", "token_ids"}
DELTA_FIELDS = {"reasoning_details"}


def _sent(events: list[dict[str, Any]], field: str) -> list[Any]:
    """Every value of ``field`` in ``events``, wherever the provider puts it."""
    found = []
    for event in events:
        if field in event:
            found.append(event[field])
        for choice in event.get("choices", []):
            if field in choice:
                found.append(choice[field])
            if field in choice.get("delta", {}):
                found.append(choice["delta"][field])
    return found


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_an_imported_provider_field_is_kept_and_served_or_named(field: str, tmp_path: Path) -> None:
    body = FIELDS[field]
    imported = read_vcr(_vcr(tmp_path / "cassette.yaml", body))
    (interaction,) = imported.cassette.interactions
    meta = interaction.response
    assert meta is not None
    named = [note for note in imported.notes if field in note]
    if named:  # per-event data: said so, in the import's output
        assert field in " ".join(meta.unkept)
        assert "changes from event to event" in named[0]
        return
    kept = json.dumps(meta.extras)
    assert f'"{field}"' in kept
    path = tmp_path / "imported.msgpack"
    from chunktape import save_cassette

    save_cassette(imported.cassette, path)
    served, _ = _served(path)
    # Sent back with the same value, where the provider sent something other than nothing.
    assert [value for value in _sent(served, field) if value] == [
        value for value in _sent(_events(body), field) if value
    ]


@pytest.mark.parametrize("field", ["reasoning_details", "token_ids"])
def test_the_cli_import_lists_the_fields_it_could_not_keep(field: str, tmp_path: Path) -> None:
    source = _vcr(tmp_path / "cassette.yaml", FIELDS[field])
    result = CliRunner().invoke(app, ["import-vcr", str(source), "-o", str(tmp_path / "out.msgpack")])
    assert result.exit_code == 0, result.output
    assert field in result.output
    assert "changes from event to event" in result.output


# -- serve gives back what was recorded, for every way of recording ----------------------------------------------

ANSWER = sse(
    chunk(ROLE, model="gpt-4o-mini-2024-07-18", service_tier="default"),
    chunk({"content": "Hi"}, model="gpt-4o-mini-2024-07-18", service_tier="default"),
    chunk({}, finish_reason="stop", model="gpt-4o-mini-2024-07-18", service_tier="default"),
    chunk(
        choices=False,
        model="gpt-4o-mini-2024-07-18",
        service_tier="default",
        usage={"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    ),
)
HEADERS = {"x-request-id": "req_abc", "x-ratelimit-remaining-requests": "99", "openai-processing-ms": "7"}
KEY = "sk-meta-abcdefghijklmnopqrstuvwxyz0123"


def _question(client: openai.OpenAI) -> str:
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    return "".join(event.choices[0].delta.content or "" for event in stream if event.choices)


def _recorded_by(way: str, provider: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / f"{way}.msgpack"
    provider.enqueue(FakeResponse(body=ANSWER, headers=HEADERS))
    if way == "transport":
        client = httpx2.Client(transport=RecordingTransport(httpx2.HTTPTransport(), path))
        with openai.OpenAI(base_url=provider.url + "/v1", api_key=KEY, http_client=client) as sdk:
            assert _question(sdk) == "Hi"
    elif way == "proxy":
        with RecordingProxy(provider.url + "/v1", path) as proxy, openai.OpenAI(base_url=proxy.url, api_key=KEY) as sdk:
            assert _question(sdk) == "Hi"
    elif way == "record":
        monkeypatch.setenv("META_KEY", KEY)
        result = CliRunner().invoke(
            app,
            [
                "record",
                "--prompt",
                "hi",
                "-o",
                str(path),
                "--base-url",
                provider.url + "/v1",
                "--model",
                "gpt-4o-mini",
                "--api-key-env",
                "META_KEY",
            ],
        )
        assert result.exit_code == 0, result.output
    else:
        seen = httpx2.post(
            provider.url + "/v1/chat/completions",
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        )
        vcr_path = tmp_path / "answer.yaml"
        request = {
            "body": json.dumps(
                {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            ),
            "headers": {},
            "method": "POST",
            "uri": "https://api.openai.com/v1/chat/completions",
        }
        response = {
            "body": {"string": seen.content.decode()},
            "headers": {name: [value] for name, value in seen.headers.items()},
            "status": {"code": 200, "message": "OK"},
        }
        vcr_path.write_text(
            yaml.safe_dump({"interactions": [{"request": request, "response": response}], "version": 1})
        )
        from chunktape import save_cassette

        save_cassette(read_vcr(vcr_path).cassette, path)
    return path


@pytest.mark.parametrize("way", ["transport", "proxy", "record", "import-vcr"])
def test_serve_gives_back_the_recorded_metadata(
    way: str, fake_provider: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _recorded_by(way, fake_provider, tmp_path, monkeypatch)
    (interaction,) = load_cassette(path).interactions
    assert interaction.response is not None, way
    served, headers = _served(path, "gpt-4o-mini")
    sent = _events(ANSWER)
    for field in ("id", "model", "created", "system_fingerprint", "service_tier"):
        assert {event.get(field) for event in served} == {event.get(field) for event in sent}, field
    for name, value in HEADERS.items():
        assert headers.get(name) == value, name
    assert served[-1]["usage"] == sent[-1]["usage"]


def test_a_stream_recorded_without_a_finish_reason_is_served_without_one(tmp_path: Path) -> None:
    body = sse(chunk(ROLE), chunk({"content": "Hi"}))  # ends with [DONE] and no finish_reason
    path = tmp_path / "nofinish.msgpack"
    from chunktape import save_cassette

    save_cassette(read_vcr(_vcr(tmp_path / "c.yaml", body)).cassette, path)
    served, _ = _served(path)
    assert all(choice.get("finish_reason") is None for event in served for choice in event["choices"])


def test_a_non_streamed_reply_is_served_with_its_own_fields_only(tmp_path: Path) -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    vcr_path = tmp_path / "c.yaml"
    request = {
        "body": json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        "headers": {},
        "method": "POST",
        "uri": "https://api.openai.com/v1/chat/completions",
    }
    response = {
        "body": {"string": json.dumps(completion)},
        "headers": {"content-type": ["application/json"]},
        "status": {"code": 200, "message": "OK"},
    }
    vcr_path.write_text(yaml.safe_dump({"interactions": [{"request": request, "response": response}], "version": 1}))
    path = tmp_path / "whole.msgpack"
    from chunktape import save_cassette

    save_cassette(read_vcr(vcr_path).cassette, path)
    with ReplayServer(path) as server:
        reply = httpx2.post(
            f"{server.url}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        )
    assert reply.json() == completion
