"""Credentials spelled the ways people and tools spell them: labelled AWS secret keys five more ways, in the five
places a recording holds text, and keys in URLs (query parameters, userinfo) wherever they are echoed.

The AWS rule is detect-secrets' AWSKeyDetector (a label with ``aws`` and ``key``/``token``/``pass``..., then the
40-character value), its gap to the value widened to 64 characters of anything; every shape is also searched
through percent-escapes and HTML character references. Nothing here may reach a file on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from typer.testing import CliRunner

from chunktape import ErrorCode, LlmError, save_cassette
from chunktape._cassettes.model import Cassette, Completed, Event, Interaction, RecordedRequest
from chunktape._secrets import REDACTED, redact_url, scanner, url_secrets
from chunktape.cli import app
from chunktape.http import RecordingTransport
from chunktape.http._vcr import read_vcr
from fake_provider import FakeProvider, FakeResponse, chunk, sse, tool_delta
from helpers import options, text_stream

VALUE = "Qx7Lm2Np9R/t4Vw8Yz3Bc6+Df1Gh5Jk0LsAbCdEf"  # 40 characters, synthetic
SPELLINGS = {
    "newline": ("aws_secret_access_key\n", VALUE),
    "far-label": ("aws_secret_access_key (the one for prod account) = ", VALUE),
    "boto": ("secret_key=", VALUE),
    "html-escaped": ("&quot;SecretAccessKey&quot;: &quot;", VALUE + "&quot;"),
    "url-encoded": ("aws_secret_access_key=", VALUE.replace("/", "%2F")),
}
TELLS = (VALUE[:12], VALUE[-12:], VALUE[12:28])
"""Pieces of the value that must not survive (the URL-encoded form keeps each too)."""


def _on_disk(folder: Path) -> bytes:
    return b"".join(file.read_bytes() for file in sorted(folder.iterdir()) if file.is_file())


def _thirds(text: str) -> list[str]:
    third = len(text) // 3
    return [text[:third], text[third : 2 * third], text[2 * third :]]


def _responses(label: str, value: str) -> list[FakeResponse]:
    spelled = label + value
    text = sse(*(chunk({"content": piece}) for piece in _thirds(spelled)), chunk({}, finish_reason="stop"))
    apart = sse(chunk({"content": label}), chunk({"content": value}), chunk({}, finish_reason="stop"))
    arguments = json.dumps({"note": spelled})
    tool = sse(
        chunk(tool_delta(0, "", id="call_1", name="save")),
        *(chunk(tool_delta(0, piece)) for piece in _thirds(arguments)),
        chunk({}, finish_reason="tool_calls"),
    )
    error = json.dumps({"error": {"message": f"bad config: {spelled}"}}).encode()
    return [
        FakeResponse(body=sse(chunk({"content": "ok"}, finish_reason="stop"))),  # the request holds it
        FakeResponse(body=text),
        FakeResponse(body=apart),
        FakeResponse(body=tool),
        FakeResponse(body=error, status=400, content_type="application/json"),
    ]


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
async def test_a_labelled_aws_secret_reaches_no_file_in_any_place(
    fake_provider: FakeProvider, tmp_path: Path, spelling: str
) -> None:
    label, value = SPELLINGS[spelling]
    fake_provider.enqueue(*_responses(label, value))
    path = tmp_path / "aws.msgpack"
    transport = RecordingTransport(httpx2.AsyncHTTPTransport(), path)
    client = httpx2.AsyncClient(transport=transport, timeout=10)
    url = fake_provider.url + "/v1/chat/completions"
    for number in range(5):
        content = f"use {label}{value}" if number == 0 else f"call {number}"
        body = {"model": "m", "messages": [{"role": "user", "content": content}], "stream": True}
        await client.post(url, json=body)
    with pytest.raises(LlmError) as caught:
        await client.aclose()
    assert caught.value.code is ErrorCode.SECRET_DETECTED
    assert "AWS secret access key" in caught.value.message
    written = _on_disk(tmp_path)
    assert written  # the redacted recording was kept aside
    for tell in TELLS:
        assert tell.encode() not in written, (spelling, tell)
        assert tell.replace("/", "%2F").encode() not in written
    assert not path.exists()  # the redacted recording is the failed one: the cassette is not written


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_show_masks_each_spelling(tmp_path: Path, spelling: str) -> None:
    label, value = SPELLINGS[spelling]
    interaction = Interaction(
        request=RecordedRequest.from_options(options("hi")),
        events=[Event(t_ns=n, chunk=c) for n, c in enumerate(text_stream(label, value))],
        outcome=Completed(t_ns=9),
    )
    path = tmp_path / "kept.json"
    save_cassette(Cassette(interactions=[interaction]), path)  # a cassette that was allowed to keep it
    shown = CliRunner().invoke(app, ["show", str(path), "--json"])
    assert shown.exit_code == 0, shown.output
    assert VALUE[:12] not in shown.stdout
    assert REDACTED in shown.stdout


def test_ordinary_text_near_an_aws_label_is_left_alone() -> None:
    scan = scanner()
    for text in (
        "set aws_secret_access_key in the console, then commit 3f786850e387550fdab836ed7e6dc881de23001b",
        "the secret_key setting is documented at https://docs.example.test/a/very/long/path/to/the/page",
        "AWS keys: rotate them; see 50% of the docs &amp; the FAQ",
    ):
        assert list(scan.matches(text)) == [], text


# -- keys in URLs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "secrets", "shown"),
    [
        (
            "http://admin:s3cr3tPassw0rdXYZ@127.0.0.1:1/v1",
            ["s3cr3tPassw0rdXYZ"],
            "http://admin:[REDACTED]@127.0.0.1:1/v1",
        ),
        ("https://ghp_abcdefghijklmnop@host/x", ["ghp_abcdefghijklmnop"], "https://[REDACTED]@host/x"),
        (
            "https://h/v1?api-version=1&api_key=Zq8Wm3Xv7Bn2Lk9Jh4Gf6Ds1&x=y",
            ["Zq8Wm3Xv7Bn2Lk9Jh4Gf6Ds1"],
            "https://h/v1?api-version=1&api_key=[REDACTED]&x=y",
        ),
        (
            "https://h/b?sv=2024&sig=abc%2Fdefghij%3D&X-Amz-Signature=0123456789abcdef&token=tok-0123456789",
            ["abc%2Fdefghij%3D", "0123456789abcdef", "tok-0123456789", "abc/defghij="],
            "https://h/b?sv=2024&sig=[REDACTED]&X-Amz-Signature=[REDACTED]&token=[REDACTED]",
        ),
        ("https://h/v1?key=1&access_token=true", [], "https://h/v1?key=[REDACTED]&access_token=[REDACTED]"),
    ],
    ids=["userinfo", "token-as-user", "api-key", "sas-and-sigv4", "trivial-values"],
)
def test_the_credentials_a_url_carries(url: str, secrets: list[str], shown: str) -> None:
    assert sorted(url_secrets(url)) == sorted(secrets)
    assert redact_url(url) == shown


def test_a_query_credential_in_text_is_a_key_shape() -> None:
    text = 'could not reach "https://h/v1/chat/completions?api-version=1&api_key=Zq8Wm3Xv7Bn2Lk9Jh4Gf6Ds1"'
    assert scanner().redact(text) == 'could not reach "https://h/v1/chat/completions?api-version=1&api_key=[REDACTED]"'
    assert scanner().redact("?key=[REDACTED]&v=1") == "?key=[REDACTED]&v=1"  # a fixed point


def test_import_vcr_redacts_a_query_key_the_response_echoes(tmp_path: Path) -> None:
    key = "Zq8Wm3Xv7Bn2Lk9Jh4Gf6Ds1Pa5Oe0Ri"
    stream = "".join(
        f"data: {json.dumps(event)}\n\n"
        for event in (
            {"choices": [{"index": 0, "delta": {"content": f"your key is {key}"}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "system_fingerprint": key},
        )
    )
    uri = f"https://api.example.test/v1/chat/completions?api-version=1&api_key={key}"
    request: dict[str, Any] = {
        "body": json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        "headers": {},
        "method": "POST",
        "uri": uri,
    }
    exchange = {
        "request": request,
        "response": {
            "body": {"string": stream},
            "headers": {"content-type": ["text/event-stream"]},
            "status": {"code": 200, "message": "OK"},
        },
    }
    other = {
        **exchange,
        "request": {**request, "method": "GET", "uri": uri.replace("chat/completions", "models")},
    }
    source = tmp_path / "keyed.yaml"
    source.write_text(yaml.safe_dump({"interactions": [exchange, other], "version": 1}), encoding="utf-8")
    imported = read_vcr(source)
    assert key not in " ".join(imported.notes)
    out = tmp_path / "out.json"
    result = CliRunner().invoke(app, ["import-vcr", str(source), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert key not in result.stdout + result.stderr
    assert key not in out.read_text()
    assert REDACTED in out.read_text()
