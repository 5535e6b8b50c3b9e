"""Secrets never reach a cassette: redacted when known, refused (SECRET_DETECTED) when found."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunktape import (
    BlockEnd,
    BlockStart,
    CallId,
    Cassette,
    CassetteMeta,
    Completed,
    ErrorCode,
    Finish,
    FinishReason,
    GenerateOptions,
    LlmError,
    Outcome,
    Raised,
    ReasoningBlock,
    ReasoningDelta,
    RecordedRequest,
    RecordingAdapter,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
    load_cassette,
    redact,
    validate,
)
from chunktape._cassettes.journal import journal_path
from chunktape._cassettes.redaction import REDACTED, env_secrets, find_secrets
from helpers import PacedAdapter, collect, interaction_of, options, paced, text_stream, tool_stream
from strategies import cut_points, picks

DECLARED = "hunter2-very-secret-value"
PATTERN_KEY = "sk-abcdefghijklmnopqrstuvwxyz012345"


async def _record(path: Path, inner: PacedAdapter, request: GenerateOptions | None = None, **kwargs: object) -> None:
    async with RecordingAdapter(inner, path, **kwargs) as recorder:  # type: ignore[arg-type]
        try:
            await collect(recorder.stream(request or options()))
        except LlmError as error:
            if error.code is ErrorCode.SECRET_DETECTED:
                raise
    # saving happens on exit


def _split_secret_stream(secret: str) -> list[StreamChunk]:
    middle = len(secret) // 2
    return text_stream("my key is ", secret[:middle], secret[middle:], " ok")


async def test_a_declared_secret_split_across_two_deltas_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    inner = PacedAdapter(paced(_split_secret_stream(DECLARED)), secrets=[DECLARED])
    with pytest.raises(LlmError) as caught:
        await _record(path, inner, redact=False)
    assert caught.value.code is ErrorCode.SECRET_DETECTED
    assert "block 0 streamed text" in str(caught.value)
    assert DECLARED not in str(caught.value)
    assert not path.exists()
    assert not journal_path(path).exists()  # the journal held it unredacted


async def test_a_declared_secret_split_across_deltas_is_redacted_by_default(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    inner = PacedAdapter(paced(_split_secret_stream(DECLARED)), secrets=[DECLARED])
    await _record(path, inner)
    data = path.read_bytes()
    assert DECLARED.encode() not in data
    assert DECLARED[:8].encode() not in data  # neither half survives
    chunks = load_cassette(path).interactions[0].chunks
    validate(chunks)  # deltas still concatenate to the block-end
    assert chunks[5].block.text == f"my key is {REDACTED} ok"  # type: ignore[union-attr]


async def test_a_key_in_a_tool_argument_is_detected(tmp_path: Path) -> None:
    chunks = tool_stream("login", '{"token": "sk-abcdefgh', 'ijklmnopqrstuvwxyz012345"}')
    with pytest.raises(LlmError) as caught:
        await _record(tmp_path / "c.msgpack", PacedAdapter(paced(chunks)))
    assert caught.value.code is ErrorCode.SECRET_DETECTED
    assert "api key (sk-...)" in str(caught.value)


async def test_an_env_secret_in_a_request_message_is_redacted_or_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACME_API_KEY", "acme-live-0123456789")
    request = options("please use acme-live-0123456789 for the call")
    with pytest.raises(LlmError) as caught:
        await _record(tmp_path / "refused.msgpack", PacedAdapter(paced(text_stream("ok"))), request, redact=False)
    assert caught.value.code is ErrorCode.SECRET_DETECTED
    assert "request.messages[0].content" in str(caught.value)

    await _record(tmp_path / "c.msgpack", PacedAdapter(paced(text_stream("ok"))), request)
    recorded = load_cassette(tmp_path / "c.msgpack").interactions[0].request
    assert recorded.messages[0].content == f"please use {REDACTED} for the call"
    assert b"acme-live" not in (tmp_path / "c.msgpack").read_bytes()


async def test_a_key_in_an_error_message_is_detected_unless_allowed(tmp_path: Path) -> None:
    error = LlmError(f"invalid api key {PATTERN_KEY}", ErrorCode.PROVIDER_HTTP_ERROR, status=401)
    with pytest.raises(LlmError) as caught:
        await _record(tmp_path / "c.msgpack", PacedAdapter([], error=error))
    assert caught.value.code is ErrorCode.SECRET_DETECTED
    assert "error message" in str(caught.value)

    await _record(tmp_path / "c.msgpack", PacedAdapter([], error=error), allow_secrets=[PATTERN_KEY])
    assert PATTERN_KEY.encode() in (tmp_path / "c.msgpack").read_bytes()


async def test_extra_literals_can_be_redacted(tmp_path: Path) -> None:
    await _record(
        tmp_path / "c.msgpack", PacedAdapter(paced(text_stream("codename bluebird-42"))), redact=["bluebird-42"]
    )
    assert b"bluebird" not in (tmp_path / "c.msgpack").read_bytes()


def test_env_secrets_picks_credential_names_only() -> None:
    environ = {
        "OPENAI_API_KEY": "sk-long-enough",
        "GITHUB_TOKEN": "ghp_abcdefgh",
        "DB_SECRET": "s3cr3t-value",
        "SHORT_TOKEN": "1",
        "HOME": "/root/very/long/path",
    }
    assert env_secrets(environ) == {
        "OPENAI_API_KEY": "sk-long-enough",
        "GITHUB_TOKEN": "ghp_abcdefgh",
        "DB_SECRET": "s3cr3t-value",
    }


def test_redact_function_redacts_request_chunks_and_errors() -> None:
    chunks = tool_stream("f", '{"k": "sk-abcdefghij', 'klmnopqrstuvwxyz012345"}')
    raised = Raised(t_ns=9, code="PROVIDER_HTTP_ERROR", message=f"bad {DECLARED}")
    cassette = _one(chunks, f"key {DECLARED}", raised, model="m")
    assert len(find_secrets(cassette, [DECLARED])) >= 3
    cleaned = redact(cassette, [DECLARED])
    assert find_secrets(cleaned, [DECLARED]) == []
    (result,) = cleaned.interactions
    validate(result.chunks)
    assert result.request.messages[0].content == f"key {REDACTED}"
    assert result.request.fingerprint == RecordedRequest.from_options(result.request).fingerprint
    assert result.outcome.message == f"bad {REDACTED}"  # type: ignore[union-attr]


async def test_redact_and_find_take_a_path_too(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    inner = PacedAdapter(paced(text_stream("say bluebird-42 twice")))
    await _record(path, inner)
    assert find_secrets(path, ["bluebird-42"]) == [
        "credential blue…(11 chars) in interaction #0 block 0 streamed text",
        "credential blue…(11 chars) in interaction #0 chunk #2 block-end",
    ]
    assert find_secrets(redact(path, ["bluebird-42"]), ["bluebird-42"]) == []


# -- before it reaches disk: every place a credential can hide, with a cassette already on disk --------------


def _leak(where: str, secret: str, *, declared: Sequence[str] = ()) -> tuple[PacedAdapter, GenerateOptions]:
    """An adapter (declaring ``declared`` as its secrets) and request that put ``secret`` in one place: split
    over two text deltas, inside a tool call's arguments (split too), in a request message, or in an error
    message."""
    half = len(secret) // 2
    if where == "split-text":
        return PacedAdapter(paced(text_stream("key: ", secret[:half], secret[half:])), secrets=declared), options()
    if where == "tool-argument":
        chunks = tool_stream("login", '{"token": "' + secret[:half], secret[half:] + '"}')
        return PacedAdapter(paced(chunks), secrets=declared), options()
    if where == "request-message":
        return PacedAdapter(paced(text_stream("ok")), secrets=declared), options(f"use {secret} please")
    error = LlmError(f"401: key {secret} is invalid", ErrorCode.PROVIDER_HTTP_ERROR, status=401)
    return PacedAdapter(paced(text_stream("x")[:1]), error=error, secrets=declared), options()


WHERE = ["split-text", "tool-argument", "request-message", "error-message"]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("mode", ["replace", "append"])
@pytest.mark.parametrize("secret", [PATTERN_KEY, "AKIAABCDEFGHIJKLMNOP"], ids=["sk-key", "aws-key"])
async def test_a_key_is_refused_before_disk_and_the_cassette_on_disk_is_unchanged(
    tmp_path: Path, where: str, mode: str, secret: str
) -> None:
    path = tmp_path / "c.msgpack"
    await _record(path, PacedAdapter(paced(text_stream("earlier"))), options("earlier"))
    before = path.read_bytes()
    inner, request = _leak(where, secret)
    with pytest.raises(LlmError) as caught:
        await _record(path, inner, request, append=mode == "append")
    assert caught.value.code is ErrorCode.SECRET_DETECTED
    assert secret not in str(caught.value)
    assert path.read_bytes() == before
    # no journal, no temp file; the recording is kept aside, redacted
    assert sorted(os.listdir(tmp_path)) == ["c.failed.msgpack", "c.msgpack"]
    assert secret.encode() not in (tmp_path / "c.failed.msgpack").read_bytes()


@pytest.mark.parametrize("where", WHERE)
async def test_a_declared_secret_anywhere_is_redacted_on_the_way_to_disk(tmp_path: Path, where: str) -> None:
    path = tmp_path / "c.json"
    inner, request = _leak(where, DECLARED, declared=[DECLARED])
    await _record(path, inner, request)
    data = path.read_bytes()
    assert DECLARED[: len(DECLARED) // 2].encode() not in data
    assert DECLARED[len(DECLARED) // 2 :].encode() not in data
    assert REDACTED.encode() in data
    assert sorted(os.listdir(tmp_path)) == ["c.json"]


@pytest.mark.parametrize("where", WHERE)
async def test_redact_removes_a_key_pattern_wherever_it_is(tmp_path: Path, where: str) -> None:
    inner, request = _leak(where, PATTERN_KEY)
    chunks: list[StreamChunk] = []
    outcome: Outcome = Completed(t_ns=1)
    try:
        chunks = await collect(inner.stream(request))
    except LlmError as error:
        outcome = Raised(t_ns=1, code=error.code.value, message=error.message, status=error.status)
    cassette = _one(chunks, outcome=outcome, request=RecordedRequest.from_options(request))
    assert find_secrets(cassette)
    cleaned = redact(cassette)
    assert find_secrets(cleaned) == []
    assert PATTERN_KEY[:12].encode() not in msgspec.json.encode(cleaned)
    if outcome == Completed(t_ns=1):
        validate(cleaned.interactions[0].chunks)


# -- the repository's own cassettes ---------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def _repository_files() -> list[Path]:
    """Every data file under ``cassettes/`` and ``tests/``: cassettes, journals, fixtures (not our .py sources,
    which hold fake keys on purpose)."""
    found = []
    for folder in (ROOT / "cassettes", ROOT / "tests"):
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix not in {".py", ".pyc"} and ".hypothesis" not in path.parts:
                found.append(path)
    return sorted(found)


def test_no_cassette_in_the_repository_holds_a_key() -> None:
    from chunktape._cassettes.redaction import KEY_PATTERNS

    files = _repository_files()
    assert any(path.suffix == ".msgpack" for path in files)
    cassettes = 0
    for path in files:
        text = path.read_bytes().decode("latin-1")
        for label, pattern in KEY_PATTERNS.items():
            assert not pattern.search(text), f"{path.relative_to(ROOT)} holds a {label}"
        if path.suffix in {".msgpack", ".json"}:
            try:
                cassette = load_cassette(path)
            except LlmError:
                continue  # not a cassette (a fixture of another kind)
            cassettes += 1
            assert find_secrets(cassette, env_secrets().values()) == [], path  # also across delta boundaries
    assert cassettes >= 6


# -- gaps the review found: finish details, escapes, ids, and matches that redaction itself creates ---------------


def _one(chunks: list[StreamChunk], content: str = "x", outcome: Outcome | None = None, **fields: Any) -> Cassette:
    """A one-interaction cassette, one chunk per nanosecond (see ``helpers.interaction`` for ``fields``)."""
    return Cassette(interactions=[interaction_of(chunks, outcome, content=content, gap_ns=1, start_ns=0, **fields)])


def test_a_secret_in_a_finish_detail_is_found_and_redacted() -> None:
    chunks = text_stream("ok")
    chunks[-1] = Finish(reason=FinishReason(kind="error", detail=f"upstream said {PATTERN_KEY} / {DECLARED}"))
    cassette = _one(chunks)
    findings = find_secrets(cassette, [DECLARED])
    assert any("finish detail" in finding and "api key" in finding for finding in findings)
    assert any("finish detail" in finding and "credential" in finding for finding in findings)
    cleaned = redact(cassette, [DECLARED])
    assert find_secrets(cleaned, [DECLARED]) == []
    assert cleaned.interactions[0].chunks[-1] == Finish(
        reason=FinishReason(kind="error", detail=f"upstream said {REDACTED} / {REDACTED}")
    )


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"note": "line one\\n' + PATTERN_KEY + '"}', '{"note": "line one\\n' + REDACTED + '"}'),
        ('{"note": "col\\t' + PATTERN_KEY + '"}', '{"note": "col\\t' + REDACTED + '"}'),
        ('{"env": "OPENAI_' + PATTERN_KEY + '"}', '{"env": "OPENAI_' + REDACTED + '"}'),
        # an escape whose raw form ends in a hex digit: only the decoded text shows the key, which alone goes
        ('{"a": 1, "note": "x\\u000a' + PATTERN_KEY + '"}', '{"a": 1, "note": "x\\u000a' + REDACTED + '"}'),
    ],
    ids=["after-newline-escape", "after-tab-escape", "after-underscore", "after-unicode-escape"],
)
def test_a_key_right_after_an_escape_or_underscore_is_found_and_redacted(arguments: str, expected: str) -> None:
    half = len(arguments) // 2
    cassette = _one(tool_stream("f", arguments[:half], arguments[half:]))
    assert any("api key (sk-...)" in finding for finding in find_secrets(cassette))
    cleaned = redact(cassette)
    assert find_secrets(cleaned) == []
    (interaction,) = cleaned.interactions
    validate(interaction.chunks)
    assert interaction.chunks[3].block.arguments == expected  # type: ignore[union-attr]
    assert msgspec.json.decode(expected)  # still JSON


@pytest.mark.parametrize("text", ["the task-abcdefghijklmnopqrstuvwxyz0123 is done", "ask-abcdefghijklmnopqrstuvwxyz0"])
def test_a_key_prefix_inside_a_word_is_not_a_key(text: str) -> None:
    assert find_secrets(_one(text_stream(text))) == []


def test_a_secret_in_a_tool_call_id_is_redacted_in_the_deltas_and_the_block_end_alike() -> None:
    call_id = f"call_{PATTERN_KEY}"
    cassette = _one(tool_stream("f", '{"a":', " 1}", call_id=call_id))
    assert find_secrets(cassette)
    cleaned = redact(cassette)
    assert find_secrets(cleaned) == []
    chunks = cleaned.interactions[0].chunks
    validate(chunks)  # the delta's id and the block-end's still agree
    assert chunks[1].id == chunks[3].block.id == f"call_{REDACTED}"  # type: ignore[union-attr]
    assert PATTERN_KEY[:10].encode() not in msgspec.json.encode(cleaned)


def test_redacting_a_secret_never_leaves_a_key_it_made_visible() -> None:
    """``...0123456789sk-AAA...`` holds no key (a digit precedes ``sk-``) until the literal before it is replaced:
    ``[REDACTED]sk-AAA...`` is one. Redaction must not stop there."""
    secret = "zz-secret-0123456789"
    key = "sk-" + "A" * 30
    for pieces in [(secret + key,), (secret[:7], secret[7:] + key[:5], key[5:])]:
        cassette = _one(text_stream(*pieces), content=f"use {secret}{key}")
        cleaned = redact(cassette, [secret])
        assert find_secrets(cleaned, [secret]) == []
        (interaction,) = cleaned.interactions
        validate(interaction.chunks)
        assert interaction.request.messages[0].content == f"use {REDACTED}"
        assert "".join(c.text for c in interaction.chunks if isinstance(c, TextDelta)) == REDACTED


_SECRET = "zz-secret-0123456789"
_PIECES = [
    "ab ", "x", "9", "_", "\n", "\t", '"', "\\", "[", "]", "REDACTED", "sk-", "zz-secret-", "0123", "AKIA",
    _SECRET, PATTERN_KEY, "AKIAABCDEFGHIJKLMNOP", "ghp_" + "b" * 36, "Bearer " + "c" * 24,
]  # fmt: skip
_bases = picks(_PIECES, min_size=1, max_size=6).map("".join)
_kinds = st.sampled_from(["text", "reasoning", "tool-call"])
_details = st.none() | _bases
_block_counts = st.integers(1, 3)


def _split(text: str, draw: st.DrawFn) -> list[str]:
    cuts = cut_points(draw, len(text), max_cuts=5, inner=True)
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@st.composite
def _cassettes_with_secrets(draw: st.DrawFn) -> Cassette:
    """One interaction of 1-3 blocks, each field built from pieces that hold secrets, key shapes or their parts."""
    chunks: list[StreamChunk] = []
    for index in range(draw(_block_counts)):
        kind = draw(_kinds)
        base = draw(_bases)
        if kind == "tool-call":
            arguments = msgspec.json.encode({"v": base, "w": [base[::-1]]}).decode()
            call_id = CallId("call_" + base if draw(st.booleans()) else "call_1")
            name = base if draw(st.booleans()) else "f"
            pieces = _split(arguments, draw)
            chunks += [
                BlockStart(index=index, block_type="tool-call"),
                *(
                    ToolCallDelta(
                        index=index,
                        id=call_id if n == 0 else None,
                        name=name if n == 0 else None,
                        arguments_delta=piece,
                    )
                    for n, piece in enumerate(pieces)
                ),
                BlockEnd(index=index, block=ToolCallBlock(id=call_id, name=name, arguments=arguments)),
            ]
        else:
            delta: type[TextDelta] | type[ReasoningDelta] = TextDelta if kind == "text" else ReasoningDelta
            block = TextBlock(text=base) if kind == "text" else ReasoningBlock(text=base)
            chunks += [
                BlockStart(index=index, block_type=kind),  # type: ignore[arg-type]
                *(delta(index=index, text=piece) for piece in _split(base, draw)),
                BlockEnd(index=index, block=block),
            ]
    detail = draw(_details)
    chunks += [
        UsageChunk(usage=TokenUsage(input_tokens=1, output_tokens=1)),
        Finish(reason=FinishReason(kind="stop", detail=detail)),
    ]
    message = draw(_bases)
    outcome = Raised(t_ns=1, code="TIMEOUT", message=message) if draw(st.booleans()) else None
    cassette = _one(chunks, content=draw(_bases), outcome=outcome)
    return msgspec.structs.replace(cassette, meta=CassetteMeta(tags={"note": draw(_bases)}))


# A composite, not st.data(): data.draw records every value for the report, which was half of each example.
@settings(max_examples=300, deadline=None)
@given(cassette=_cassettes_with_secrets())
def test_nothing_is_found_after_redaction_wherever_secrets_are_put(cassette: Cassette) -> None:
    plain = msgspec.json.encode(cassette).decode()

    if _SECRET in plain:
        assert find_secrets(cassette, [_SECRET])
    cleaned = redact(cassette, [_SECRET])
    assert find_secrets(cleaned, [_SECRET]) == []
    assert _SECRET not in msgspec.json.encode(cleaned).decode()
    validate(cleaned.interactions[0].chunks)  # deltas still concatenate to their (redacted) block-ends
    assert redact(cleaned, [_SECRET]) == cleaned
