"""Azure OpenAI's route: ``openai.AzureOpenAI`` posts to ``/openai/deployments/{name}/chat/completions?api-version=``;
recorded through ``RecordingTransport``, it replays exactly in process (``ReplayTransport``) and through ``serve``,
sync and async; a body that names no model (as some Azure cassettes hold it) takes the deployment's name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from chunktape import load_cassette, save_cassette
from chunktape.http import RecordingTransport, ReplayServer, ReplayTransport
from chunktape.http._vcr import read_vcr
from fake_provider import FakeProvider, FakeResponse, chunk, sse

DEPLOYMENT = "gpt4o-prod"
VERSION = "2024-06-01"
KEY = "azure-key-abcdefghijklmnopqrstuvwxyz0123"
ANSWER = sse(
    chunk({"role": "assistant", "content": ""}, model="gpt-4o-2024-08-06"),
    chunk({"content": "Bonjour"}, model="gpt-4o-2024-08-06"),
    chunk({}, finish_reason="stop", model="gpt-4o-2024-08-06"),
)
MESSAGES: Any = [{"role": "user", "content": "Say hello in French"}]


def _azure(endpoint: str, client: Any, *, sync: bool) -> Any:
    kind = openai.AzureOpenAI if sync else openai.AsyncAzureOpenAI
    return kind(azure_endpoint=endpoint, api_version=VERSION, api_key=KEY, http_client=client, max_retries=0)


async def _ask(sdk: Any, *, sync: bool) -> tuple[str, str, str]:
    if sync:
        events = list(sdk.chat.completions.create(model=DEPLOYMENT, messages=MESSAGES, stream=True))
    else:
        events = [
            event async for event in await sdk.chat.completions.create(model=DEPLOYMENT, messages=MESSAGES, stream=True)
        ]
    if sync:
        sdk.close()
    else:
        await sdk.close()
    text = "".join(event.choices[0].delta.content or "" for event in events if event.choices)
    return text, events[0].model, events[0].id


@pytest.fixture
def recorded(fake_provider: FakeProvider, tmp_path: Path) -> Path:
    fake_provider.enqueue(FakeResponse(body=ANSWER, headers={"apim-request-id": "req-azure-1"}))
    path = tmp_path / "azure.msgpack"
    client = httpx2.Client(transport=RecordingTransport(httpx2.HTTPTransport(), path))
    with _azure(fake_provider.url, client, sync=True) as sdk:
        stream = sdk.chat.completions.create(model=DEPLOYMENT, messages=MESSAGES, stream=True)
        assert "".join(event.choices[0].delta.content or "" for event in stream if event.choices) == "Bonjour"
    seen = fake_provider.requests[-1]
    assert seen.path == f"/openai/deployments/{DEPLOYMENT}/chat/completions"
    (interaction,) = load_cassette(path).interactions
    assert interaction.request.model == DEPLOYMENT
    assert interaction.response is not None
    assert interaction.response.headers == {"apim-request-id": "req-azure-1"}
    return path


EXPECTED = ("Bonjour", "gpt-4o-2024-08-06", "4f7c2b1e-0000-4000-8000-000000000000")


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
async def test_azure_replays_exactly_in_process(recorded: Path, sync: bool) -> None:
    transport = ReplayTransport(recorded)
    client = httpx2.Client(transport=transport) if sync else httpx2.AsyncClient(transport=transport)
    sdk = _azure("http://127.0.0.1:9", client, sync=sync)
    assert await _ask(sdk, sync=sync) == EXPECTED
    transport.assert_all_played()


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
async def test_azure_replays_exactly_through_serve(recorded: Path, sync: bool) -> None:
    async with ReplayServer(recorded) as server:
        client = httpx2.Client() if sync else httpx2.AsyncClient()
        assert await _ask(_azure(server.url, client, sync=sync), sync=sync) == EXPECTED
        server.playback.assert_all_played()


def test_an_azure_body_without_a_model_takes_the_deployment(tmp_path: Path) -> None:
    """An imported Azure cassette whose request names no model, re-posted as it was recorded."""
    body = {"messages": MESSAGES, "stream": True}
    request = {
        "body": json.dumps(body),
        "headers": {},
        "method": "POST",
        "uri": f"https://example.openai.azure.com/openai/deployments/{DEPLOYMENT}/chat/completions?api-version={VERSION}",
    }
    response = {
        "body": {"string": ANSWER.decode()},
        "headers": {"content-type": ["text/event-stream"]},
        "status": {"code": 200, "message": "OK"},
    }
    import yaml

    source = tmp_path / "azure.yaml"
    source.write_text(yaml.safe_dump({"interactions": [{"request": request, "response": response}], "version": 1}))
    path = tmp_path / "azure.msgpack"
    save_cassette(read_vcr(source).cassette, path)
    url = f"/openai/deployments/{DEPLOYMENT}/chat/completions?api-version={VERSION}"
    with ReplayServer(path) as server:
        served = httpx2.post(server.url + url, json=body)
    assert served.status_code == 200, served.text
    assert b"Bonjour" in served.content
    with httpx2.Client(transport=ReplayTransport(path)) as client:
        replayed = client.post("http://127.0.0.1:9" + url, json=body)
        assert b"Bonjour" in replayed.read()
