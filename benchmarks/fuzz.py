"""``make fuzz``: coverage-guided fuzzing (atheris) of everything that reads bytes chunktape did not write.

Targets, picked by the first input byte:

0. the msgpack cassette decoder (``load_cassette`` and ``open_cassette`` + every interaction played);
1. the JSON cassette decoder (same, including the lazy sliced open);
2. the crash-journal reader (``recover``), then the validator over each recovered interaction;
3. the wire: the SSE parser and the OpenAI chunk decoder over a body split at random points;
4. the replay server's request decoding (``decode_chat_request``: body bytes to ``GenerateOptions``), then the
   request as a replay matches it (``RecordedRequest.from_options``: its fingerprint);
5. ``recover`` on any file (a cassette, garbage, a journal, under any name): refused or recovered, never changed.

The promise under test: only an ``LlmError`` with a documented code comes out, never another exception
(a crash), and nothing hangs (libFuzzer's ``-timeout``). The seed corpus is built from the example
cassettes under ``cassettes/``, so mutations start from valid files. Not run in CI.

    python benchmarks/fuzz.py [-max_total_time=600] [libFuzzer flags...] [corpus dir]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import atheris
import msgspec

with atheris.instrument_imports():
    from chunktape import (
        ErrorCode,
        LlmError,
        StreamValidator,
        load_cassette,
        open_cassette,
        recover,
        validate,
    )
    from chunktape._cassettes.codec import encode_cassette
    from chunktape._cassettes.journal import Journal
    from chunktape._cassettes.model import RecordedRequest
    from chunktape.wire._openai_chat import (
        OpenAIChatDecoder,
        chunks_to_openai_events,
        decode_chat_request,
        options_to_openai_request,
    )
    from chunktape.wire._sse import SseParser

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    ErrorCode.CASSETTE_CORRUPT,
    ErrorCode.CASSETTE_VERSION,
    ErrorCode.CASSETTE_EXHAUSTED,
    ErrorCode.PROTOCOL_VIOLATION,
    ErrorCode.INVALID_RESPONSE,
}
WORK = Path(tempfile.mkdtemp(prefix="chunktape-fuzz-"))


WIRE_CODES = frozenset({ErrorCode.INVALID_RESPONSE, ErrorCode.STREAM_ABORTED, ErrorCode.PROVIDER_HTTP_ERROR})


def _wire(data: bytes) -> None:
    """A provider body arriving in pieces: the SSE parser, then the OpenAI chunk decoder, then the validator.

    The first byte sets the piece size, so splits land anywhere (mid-line, mid-UTF-8 character). Only the
    documented wire codes may come out, and whatever the decoder emits must be a valid stream.
    """
    if not data:
        return
    size, body = data[0] % 32 + 1, data[1:]
    parser, decoder, validator = SseParser(), OpenAIChatDecoder(), StreamValidator(require_finish=False)
    try:
        for start in range(0, len(body), size):
            for item in parser.feed(body[start : start + size]):
                for chunk in decoder.feed_item(item):
                    validator.feed(chunk)
        for item in parser.close():
            for chunk in decoder.feed_item(item):
                validator.feed(chunk)
        for chunk in decoder.close():
            validator.feed(chunk)
    except LlmError as error:
        if error.code not in WIRE_CODES:  # a PROTOCOL_VIOLATION here means the decoder emitted a bad stream
            raise AssertionError(f"wire target: {error}") from error


def _request(data: bytes) -> None:
    """A request body as the replay server reads it: decoded, or refused with ``UNSUPPORTED_OPTION`` (a 400)."""
    try:
        request = decode_chat_request(data)
    except LlmError as error:
        if error.code is not ErrorCode.UNSUPPORTED_OPTION:
            raise AssertionError(f"request target: {error}") from error
        return
    RecordedRequest.from_options(request.options)


def _cassette(data: bytes, suffix: str) -> None:
    path = WORK / f"input{suffix}"
    path.write_bytes(data)
    try:
        loaded = load_cassette(path)
    except LlmError:
        loaded = None
    lazy = open_cassette(path)
    played = lazy.to_cassette()
    if loaded is None or played.interactions != loaded.interactions:
        raise AssertionError("open_cassette disagrees with load_cassette")


def _journal(data: bytes) -> None:
    path = WORK / "input.msgpack.journal"
    path.write_bytes(data)
    cassette = recover(path)
    for interaction in cassette.interactions:
        validate(interaction.chunks, require_finish=False)


_RECOVER_NAMES = ("input.msgpack.journal", "input.msgpack", "input.json", "input")


def _recover_any(data: bytes) -> None:
    """``recover`` on any file a user may point it at (a cassette, garbage, a journal): it refuses what is not a
    journal with ``CASSETTE_CORRUPT`` and never changes the file it reads."""
    if not data:
        return
    path = WORK / _RECOVER_NAMES[data[0] % len(_RECOVER_NAMES)]
    body = data[1:]
    path.write_bytes(body)
    try:
        recover(path)
    except LlmError as error:
        if error.code is not ErrorCode.CASSETTE_CORRUPT:
            raise AssertionError(f"recover target: {error}") from error
    if path.read_bytes() != body:
        raise AssertionError("recover changed the file it read")


def test_one_input(raw: bytes) -> None:
    if not raw:
        return
    target, data = raw[0] % 6, raw[1:]
    try:
        if target == 0:
            _cassette(data, ".msgpack")
        elif target == 1:
            _cassette(data, ".json")
        elif target == 2:
            _journal(data)
        elif target == 3:
            _wire(data)
        elif target == 4:
            _request(data)
        else:
            _recover_any(data)
    except LlmError as error:
        if error.code not in ALLOWED:
            raise


def build_corpus(folder: Path) -> None:
    """Seeds: every example cassette in both encodings, and a journal of each."""
    folder.mkdir(parents=True, exist_ok=True)
    for number, path in enumerate(sorted((ROOT / "cassettes").glob("*.json"))):
        cassette = load_cassette(path)
        (folder / f"{number}-msgpack").write_bytes(b"\x00" + encode_cassette(cassette, "x.msgpack"))
        (folder / f"{number}-json").write_bytes(b"\x01" + encode_cassette(cassette, "x.json"))
        journal = Journal(WORK / f"seed{number}.journal", cassette.meta)
        for ident, interaction in enumerate(cassette.interactions):
            journal.begin(ident, interaction.request, interaction.started_at, interaction.attempt)
            for event in interaction.events:
                journal.event(ident, event.t_ns, event.chunk)
            if ident % 2 == 0:
                journal.end(ident, interaction.outcome)
        journal.close(remove=False)
        (folder / f"{number}-journal").write_bytes(b"\x02" + journal.path.read_bytes())
        for ident, interaction in enumerate(cassette.interactions):  # the provider body of each interaction
            body = b"".join(chunks_to_openai_events(interaction.chunks, model=interaction.request.model))
            (folder / f"{number}-{ident}-wire").write_bytes(b"\x03" + bytes([ident * 7 % 32]) + body)
            request = options_to_openai_request(interaction.request.to_options())
            (folder / f"{number}-{ident}-request").write_bytes(b"\x04" + msgspec.json.encode(request))
        (folder / f"{number}-recover-msgpack").write_bytes(b"\x05\x01" + encode_cassette(cassette, "x.msgpack"))
        (folder / f"{number}-recover-json").write_bytes(b"\x05\x02" + encode_cassette(cassette, "x.json"))
        (folder / f"{number}-recover-journal").write_bytes(b"\x05\x00" + journal.path.read_bytes())
    (folder / "sse").write_bytes(
        b'\x03data: {"choices":[{"delta":{"content":"hi"}}]}\n\n: keep-alive\n\ndata: [DONE]\n\n'
    )


def main() -> None:
    args = sys.argv[:1]
    extra = sys.argv[1:]
    if not any(arg.startswith(("-max_total_time", "-runs")) for arg in extra):
        extra.append(f"-max_total_time={os.environ.get('FUZZ_SECONDS', '600')}")
    if not any(arg.startswith("-timeout") for arg in extra):
        extra.append("-timeout=10")  # a hang is a finding
    corpora = [arg for arg in extra if not arg.startswith("-")]
    if not corpora:
        corpus = WORK / "corpus"
        build_corpus(corpus)
        extra.append(str(corpus))
    print(
        "chunktape fuzz: targets msgpack, json, journal, wire (SSE parser + OpenAI chunk decoder), server request, "
        "recover on any file"
    )
    atheris.Setup(args + extra, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
