"""The wire layer's rooms: each protocol is a decoder, an encoder and a request codec; SSE and errors are neutral."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from chunktape.errors import ErrorCode
from chunktape.wire import http_errors
from chunktape.wire import openai_chat as package
from chunktape.wire.openai_chat import decoder, encoder, requests
from helpers import SRC, imports_of

WIRE = SRC / "wire"

# Every name callers imported from the single ``openai_chat`` module before the split: none may go away.
FORMER_NAMES = {
    "ChatChunk",
    "DEEPSEEK_REASONING",
    "DONE",
    "DONE_EVENT",
    "OPENAI_REASONING",
    "OpenAIChatDecoder",
    "OpenAIChatEncoder",
    "REASONING_FIELDS",
    "chunks_to_openai_dicts",
    "chunks_to_openai_events",
    "data_event",
    "decode_chat_chunk",
    "decode_openai_completion",
    "decode_openai_sse",
    "error_from_payload",
    "finish_from_wire",
    "finish_to_wire",
    "message_from_openai",
    "message_to_openai",
    "not_an_event_stream",
    "options_from_openai_request",
    "options_to_openai_request",
    "usage_from_wire",
    "usage_to_wire",
}


def _imports(path: Path) -> set[str]:
    return {name for name, _ in imports_of(path) if name.startswith("chunktape")}


def test_every_former_name_is_still_importable_from_the_package() -> None:
    assert set(package.__all__) >= FORMER_NAMES
    for name in FORMER_NAMES:
        assert getattr(package, name) is not None


@pytest.mark.parametrize(
    ("module", "names"),
    [
        (decoder, ["OpenAIChatDecoder", "decode_openai_sse", "decode_openai_completion", "decode_chat_chunk"]),
        (encoder, ["OpenAIChatEncoder", "chunks_to_openai_dicts", "chunks_to_openai_events", "data_event"]),
        (requests, ["options_to_openai_request", "options_from_openai_request", "message_from_openai"]),
    ],
)
def test_each_job_lives_in_its_own_module_and_the_package_re_exports_it(module: object, names: list[str]) -> None:
    for name in names:
        assert getattr(package, name) is getattr(module, name)


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("decoder", {"_fields", "http_errors", "sse"}),
        ("encoder", {"_fields"}),
        ("requests", {"_fields"}),
        ("_fields", set()),
    ],
)
def test_the_decoder_encoder_and_request_codec_do_not_import_each_other(module: str, allowed: set[str]) -> None:
    imported = _imports(WIRE / "openai_chat" / f"{module}.py")
    below = {"chunktape.protocol", "chunktape.errors"}
    wire = {name.rsplit(".", 1)[-1] for name in imported - below}
    assert wire <= allowed, f"{module}.py imports {sorted(imported - below)}"


def test_the_neutral_modules_know_no_protocol() -> None:
    for neutral in ("sse.py", "http_errors.py"):
        assert not {name for name in _imports(WIRE / neutral) if "openai" in name}, neutral
    assert package.not_an_event_stream is http_errors.not_an_event_stream


def test_the_wire_layer_imports_only_the_floors_below_it() -> None:
    allowed = ("chunktape.protocol", "chunktape.errors", "chunktape.wire")
    paths = sorted(WIRE.rglob("*.py"))
    assert len(paths) >= 7  # the neutral modules and the openai_chat package
    for path in paths:
        upward = {name for name in _imports(path) if not name.startswith(allowed)}
        assert not upward, f"{path.relative_to(WIRE)} imports {sorted(upward)}"


def test_not_an_event_stream_names_what_the_endpoint_should_stream() -> None:
    error = http_errors.not_an_event_stream(b"<html>login</html>", "text/html", streams="messages")
    assert error.code is ErrorCode.INVALID_RESPONSE
    assert "'<html>login</html>'" in error.message
    assert error.hint is not None
    assert error.hint.endswith("streams messages")
    default = package.not_an_event_stream(b"<html/>", None)
    assert default.hint == "check the base URL (a proxy or login page?) and that the endpoint streams chat completions"


def test_the_public_wire_face_is_unchanged() -> None:
    wire = importlib.import_module("chunktape.wire")
    assert wire.__all__ == [
        "OpenAIChatDecoder",
        "OpenAIChatEncoder",
        "REASONING_FIELDS",
        "SseComment",
        "SseEvent",
        "SseItem",
        "SseParser",
        "chunks_to_openai_dicts",
        "chunks_to_openai_events",
        "decode_openai_completion",
        "decode_openai_sse",
        "error_from_payload",
        "http_error",
        "not_an_event_stream",
        "options_from_openai_request",
        "options_to_openai_request",
        "parse_retry_after",
        "parse_sse",
        "retry_after_from_headers",
        "write_sse",
    ]
