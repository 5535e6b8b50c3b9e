"""``import-vcr`` on the shapes real vcrpy cassettes have: Azure deployments, pydantic-ai's ``parsed_body``
serializer, Mistral's content parts, Groq's usage, in-band errors, compressed bodies, other traffic, and an
interaction that cannot be decoded (never imported silently). Every cassette here is synthetic."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from chunktape import (
    Completed,
    ErrorCode,
    LlmError,
    Raised,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
    UsageChunk,
    load_cassette,
)
from chunktape.cli import app
from chunktape.http import import_vcr
from chunktape.http._vcr import read_vcr

CHAT = "https://api.example.test/v1/chat/completions"
HELLO = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def sse(*chunks: dict[str, Any] | str) -> str:
    return "".join(f"data: {chunk if isinstance(chunk, str) else json.dumps(chunk)}\n\n" for chunk in chunks)


def delta(**fields: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": fields, "finish_reason": None}]}


def finish(reason: str = "stop", **extra: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}], **extra}


def exchange(
    body: Any,
    response_body: str | bytes,
    *,
    uri: str = CHAT,
    method: str = "POST",
    status: int = 200,
    ctype: str = "text/event-stream",
    headers: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """One interaction in vcrpy's YAML layout (headers as lists, ``body.string``)."""
    return {
        "request": {
            "body": json.dumps(body) if body is not None else None,
            "headers": {"content-type": ["application/json"]},
            "method": method,
            "uri": uri,
        },
        "response": {
            "body": {"string": response_body},
            "headers": {"content-type": [ctype], **(headers or {})},
            "status": {"code": status, "message": "OK"},
        },
    }


def write(path: Path, *interactions: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"interactions": list(interactions), "version": 1}), encoding="utf-8")
    return path


def text_of(chunks: list[Any]) -> str:
    return "".join(chunk.text for chunk in chunks if isinstance(chunk, TextDelta))


def test_an_azure_deployment_takes_its_model_from_the_url(tmp_path: Path) -> None:
    body = {"messages": [{"role": "user", "content": "capital of Spain?"}], "stream": True, "stop": ["\nObs:"]}
    filter_results = {
        "choices": [],
        "created": 0,
        "id": "",
        "model": "",
        "prompt_filter_results": [{"prompt_index": 0}],
    }
    stream = sse(filter_results, delta(role="assistant", content=""), delta(content="Madrid"), finish(), "[DONE]")
    uri = "https://fake.openai.azure.com/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-08-01-preview"
    cassette = import_vcr(write(tmp_path / "azure.yaml", exchange(body, stream, uri=uri)))
    (interaction,) = cassette.interactions
    assert interaction.request.model == "gpt-4o-mini"
    assert interaction.request.extra == {"stop": ["\nObs:"]}
    assert isinstance(interaction.outcome, Completed)
    assert text_of(interaction.chunks) == "Madrid"


def parsed_body_cassette(path: Path) -> Path:
    """pydantic-ai's json_body_serializer: JSON bodies stored parsed, under ``parsed_body``; SSE stays a string."""
    streamed = exchange(None, sse(delta(content="Hel"), delta(content="lo"), finish(), "[DONE]"))
    del streamed["request"]["body"]
    streamed["request"]["parsed_body"] = HELLO
    completion = {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1},
    }
    plain = exchange(None, "", ctype="application/json")
    del plain["request"]["body"], plain["response"]["body"]
    plain["request"]["parsed_body"] = {**HELLO, "stream": False, "messages": [{"role": "user", "content": "capital?"}]}
    plain["response"]["parsed_body"] = completion
    path.write_text(yaml.safe_dump({"interactions": [streamed, plain]}, allow_unicode=True), encoding="utf-8")
    return path


def test_a_parsed_body_cassette_is_detected_or_named(tmp_path: Path) -> None:
    path = parsed_body_cassette(tmp_path / "pydantic_ai.yaml")
    for serializer in ("auto", "parsed-body"):
        first, second = import_vcr(path, serializer=serializer).interactions
        assert text_of(first.chunks) == "Hello"
        assert second.request.messages[0].content == "capital?"
        assert text_of(second.chunks) == "Paris"
        assert UsageChunk(usage=TokenUsage(input_tokens=5, output_tokens=1)) in second.chunks
    with pytest.raises(LlmError) as info:
        import_vcr(path, serializer="yaml")  # vcrpy's own serializer knows no parsed_body
    assert info.value.code is ErrorCode.CASSETTE_CORRUPT
    assert "yaml serializer" in info.value.message
    with pytest.raises(LlmError) as info:
        import_vcr(path, serializer="pickle")
    assert info.value.code is ErrorCode.INVALID_CONFIG
    assert "parsed-body" in info.value.message


def test_mistral_content_parts_keep_every_character(tmp_path: Path) -> None:
    thinking = "Let me weigh the options. " * 10
    answer = "The answer, in full, is forty-two."
    stream = sse(
        delta(role="assistant", content=""),
        delta(content=[{"type": "thinking", "thinking": [{"type": "text", "text": thinking}]}]),
        delta(content=[{"type": "text", "text": answer[:10]}, {"type": "text", "text": answer[10:]}]),
        finish(usage={"prompt_tokens": 9, "completion_tokens": 80}),
        "[DONE]",
    )
    message = {"content": [{"type": "text", "text": answer}]}
    completion = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    path = tmp_path / "mistral.json"  # vcrpy's json serializer, told apart from YAML by its content
    interactions = [
        exchange(HELLO, stream),
        exchange({**HELLO, "stream": False}, json.dumps(completion), ctype="application/json"),
    ]
    path.write_text(json.dumps({"interactions": interactions, "version": 1}), encoding="utf-8")
    streamed, plain = import_vcr(path).interactions
    assert isinstance(streamed.outcome, Completed)
    assert "".join(c.text for c in streamed.chunks if isinstance(c, ReasoningDelta)) == thinking
    assert text_of(streamed.chunks) == answer
    assert isinstance(plain.outcome, Completed)
    assert text_of(plain.chunks) == answer


def test_groq_usage_in_x_groq_is_kept_from_a_gzipped_binary_body(tmp_path: Path) -> None:
    usage = {"queue_time": 0.06, "prompt_tokens": 18, "completion_tokens": 4, "total_tokens": 22}
    stream = sse(delta(content="fast"), finish(x_groq={"id": "req_1", "usage": usage}), "[DONE]").encode()
    gzipped = exchange(HELLO, gzip.compress(stream), headers={"Content-Encoding": ["gzip"]})
    path = write(tmp_path / "groq.yaml", gzipped)
    assert "!!binary" in path.read_text(encoding="utf-8")
    (interaction,) = import_vcr(path).interactions
    assert text_of(interaction.chunks) == "fast"
    assert interaction.chunks[-2] == UsageChunk(usage=TokenUsage(input_tokens=18, output_tokens=4))


def test_other_traffic_is_skipped_with_a_note(tmp_path: Path) -> None:
    path = write(
        tmp_path / "mixed.yaml",
        exchange(None, json.dumps({"data": []}), uri="https://api.example.test/v1/models", method="GET"),
        exchange(HELLO, sse(delta(content="ok"), finish(), "[DONE]")),
        exchange({"input": "x", "model": "e"}, "{}", uri="https://api.example.test/v1/embeddings"),
    )
    imported = read_vcr(path)
    assert len(imported.cassette.interactions) == 1
    assert [note.split(":")[0] for note in imported.notes] == [
        "vcr interaction #0 (GET https",
        "vcr interaction #2 (POST https",
    ]
    assert all("skipped, not a request of a protocol chunktape records" in note for note in imported.notes)


def undecodable_cassette(path: Path) -> Path:
    """#0 fine, #1-#3 provider errors (in-band event, in-band object, HTTP 429), #4 a part nothing can decode."""
    error_event = "event: error\ndata: " + json.dumps({"error": {"message": "overloaded", "code": 503}}) + "\n\n"
    error_object = sse(delta(content="par"), {"error": {"message": "Tool call validation failed", "code": 400}})
    bad_part = delta(content=[{"type": "image_url", "image_url": {"url": "https://img.test/a.png"}}])
    return write(
        path,
        exchange(HELLO, sse(delta(content="fine"), finish(), "[DONE]")),
        exchange(HELLO, sse(delta(content="so far")) + error_event),
        exchange(HELLO, error_object),
        exchange(HELLO, json.dumps({"error": {"message": "Rate limit"}}), status=429, ctype="application/json"),
        exchange(HELLO, sse(delta(content="before "), bad_part, finish(), "[DONE]")),
    )


def test_an_undecodable_interaction_fails_the_import_unless_kept(tmp_path: Path) -> None:
    path = undecodable_cassette(tmp_path / "bad.yaml")
    with pytest.raises(LlmError) as info:
        import_vcr(path)
    assert info.value.code is ErrorCode.CASSETTE_CORRUPT
    assert f"vcr interaction #4 (POST {CHAT}): its response cannot be decoded" in info.value.message
    assert "image_url" in info.value.message
    kept = read_vcr(path, keep_undecodable=True)
    assert kept.notes == [
        f"vcr interaction #4 (POST {CHAT}): kept as a raised INVALID_RESPONSE, its response cannot be decoded"
    ]
    outcomes = [interaction.outcome for interaction in kept.cassette.interactions]
    assert isinstance(outcomes[0], Completed)
    # Provider errors are recorded faithfully, never taken for decode failures.
    raised = [outcome for outcome in outcomes[1:] if isinstance(outcome, Raised)]
    assert [(outcome.code, outcome.status) for outcome in raised] == [
        (ErrorCode.PROVIDER_HTTP_ERROR.value, 503),
        (ErrorCode.PROVIDER_HTTP_ERROR.value, 400),
        (ErrorCode.PROVIDER_HTTP_ERROR.value, 429),
        (ErrorCode.INVALID_RESPONSE.value, None),
    ]
    assert "overloaded" in raised[0].message
    assert text_of(kept.cassette.interactions[1].chunks) == "so far"
    assert text_of(kept.cassette.interactions[4].chunks) == "before "


def test_an_unreadable_request_is_skipped_only_when_asked(tmp_path: Path) -> None:
    path = write(
        tmp_path / "request.yaml",
        exchange({"messages": []}, sse(finish(), "[DONE]")),
        exchange(HELLO, sse(delta(content="ok"), finish(), "[DONE]")),
    )
    with pytest.raises(LlmError, match=r"vcr interaction #0 .*not a chat-completions request"):
        import_vcr(path)
    imported = read_vcr(path, keep_undecodable=True)
    assert len(imported.cassette.interactions) == 1
    assert imported.notes[0].startswith("vcr interaction #0 (POST")
    assert "skipped, its request body is not a chat-completions request" in imported.notes[0]


def test_the_cli_fails_in_one_line_and_keeps_when_asked(tmp_path: Path) -> None:
    runner = CliRunner()
    source = undecodable_cassette(tmp_path / "bad.yaml")
    out = tmp_path / "out.msgpack"
    failed = runner.invoke(app, ["import-vcr", str(source), "-o", str(out)])
    assert failed.exit_code == 3
    assert "CASSETTE_CORRUPT" in failed.stderr
    assert "vcr interaction #4" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
    assert not out.exists()
    kept = runner.invoke(app, ["import-vcr", str(source), "-o", str(out), "--keep-undecodable"])
    assert kept.exit_code == 0, kept.output
    assert "kept as a raised INVALID_RESPONSE" in kept.stderr
    assert len(load_cassette(out).interactions) == 5
    pydantic = parsed_body_cassette(tmp_path / "p.yaml")
    named = runner.invoke(app, ["import-vcr", str(pydantic), "-o", str(out), "--serializer", "parsed-body", "--force"])
    assert named.exit_code == 0, named.output
    assert "imported 2 interaction(s)" in named.stdout


def _import_cli(source: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chunktape", "import-vcr", str(source), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("shape", "said"),
    [
        pytest.param(
            exchange(HELLO, b"(\xb5/\xfd\x00X)\x00\x00{}", headers={"Content-Encoding": ["zstd"]}),
            "its body is 'zstd'-encoded (Content-Encoding), which chunktape does not decode",
            id="zstd",
        ),
        pytest.param(
            exchange(HELLO, b"\x8b\x05\x80{}\x03", headers={"content-encoding": ["br"]}),
            "its body is 'br'-encoded",
            id="brotli",
        ),
        pytest.param(exchange(None, sse(finish(), "[DONE]")), "(it has no body)", id="request-body-null"),
        pytest.param(exchange(HELLO, sse(finish(), "[DONE]"), status=99999), "99999 is no HTTP status", id="status"),
    ],
)
def test_what_a_vcr_cassette_holds_that_cannot_be_decoded_is_named_in_one_line(
    tmp_path: Path, shape: dict[str, Any], said: str
) -> None:
    """A brotli or zstd body (vcrpy's decode_compressed_response decodes gzip and deflate only) was reported as
    "not an event stream" with its compressed bytes dumped; a request without a body as "Input data was
    truncated"; a status of 99999 was imported, to be served as no HTTP status. Each is one line naming it."""
    out = tmp_path / "out.msgpack"
    done = _import_cli(write(tmp_path / "in.yaml", shape), out)
    assert done.returncode == 3
    (line,) = done.stderr.strip().splitlines()
    assert "[CASSETTE_CORRUPT]" in line
    assert "vcr interaction #0" in line
    assert said in line
    assert not out.exists()


def test_a_request_body_stored_parsed_is_read_and_retries_count_by_the_request(tmp_path: Path) -> None:
    """A serializer that stores the request body parsed (a mapping, not a string) made ``bytes(dict)`` fail; and a
    429, a 502 page and the stream that followed, one request sent three times, counted as two calls."""
    retried = [
        exchange(HELLO, json.dumps({"error": {"message": "Rate limit"}}), status=429, ctype="application/json"),
        exchange(HELLO, "<html>502 Bad Gateway</html>", status=502, ctype="text/html"),
        exchange(HELLO, sse(delta(content="ok"), finish(), "[DONE]")),
    ]
    for interaction in retried:
        interaction["request"]["body"] = HELLO
    out = tmp_path / "out.msgpack"
    done = _import_cli(write(tmp_path / "in.yaml", *retried), out)
    assert done.returncode == 0, done.stderr
    interactions = load_cassette(out).interactions
    assert [interaction.attempt for interaction in interactions] == [1, 2, 3]
    assert text_of(interactions[2].chunks) == "ok"
