"""Credential detection covers what people actually paste, wherever it lands, split, escaped or in base64."""

from __future__ import annotations

import base64
import contextlib
import string
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from chunktape import (
    BlockEnd,
    BlockStart,
    CallId,
    Cancelled,
    Cassette,
    Completed,
    ErrorCode,
    Event,
    Finish,
    FinishReason,
    GenerateOptions,
    Interaction,
    LlmError,
    Message,
    Raised,
    RecordedRequest,
    RecordingAdapter,
    StreamChunk,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    ToolSpec,
    redact,
)
from chunktape._cassettes import env_secrets, find_secrets
from chunktape._protocol import ReasoningDelta
from chunktape._secrets import REDACTED, scanner
from helpers import PacedAdapter, collect, options, paced, text_stream, tool_stream
from strategies import cut_points, picks

ALNUM = string.ascii_letters + string.digits
BODY = "Qx7Lm2Np9Rt4Vw8Yz3Bc6Df1Gh5Jk0Ls"  # synthetic; 33 characters


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _pem(body: str) -> str:
    return f"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA{body}\n{body}==\n-----END RSA PRIVATE KEY-----"


SHAPES: dict[str, Callable[[str], str]] = {
    # each builds a credential around a random alphanumeric body of at least 33 characters
    "openai project key": lambda b: f"sk-proj-{b}",
    "anthropic key": lambda b: f"sk-ant-api03-{b}",
    "google key": lambda b: f"AIza{(b * 2)[:35]}",
    "aws access key": lambda b: "AKIA" + b[:16].upper(),
    "aws session key": lambda b: "ASIA" + b[:16].upper(),
    "aws secret access key": lambda b: f"AWS_SECRET_ACCESS_KEY={(b * 2)[:38]}/+",
    "github token": lambda b: f"ghp_{b}",
    "github fine-grained token": lambda b: f"github_pat_{b}",
    "slack bot token": lambda b: f"xoxb-1234567890-{b}",
    "slack app token": lambda b: f"xapp-1-A0{b[:9]}-1234567890123-{b}",
    "slack webhook": lambda b: f"https://hooks.slack.com/services/T0ABCDEFG/B0ABCDEFG/{b[:24]}",
    "jwt": lambda b: f"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.{b[:27]}",
    "stripe live key": lambda b: f"sk_live_{b[:24]}",
    "stripe restricted key": lambda b: f"rk_live_{b[:24]}",
    "hugging face token": lambda b: f"hf_{(b * 2)[:34]}",
    "groq key": lambda b: f"gsk_{(b * 2)[:52]}",
    "xai key": lambda b: f"xai-{(b * 3)[:80]}",
    "pem private key": _pem,
    "basic auth": lambda b: "Basic " + _b64(f"admin:{b[:12]}"),
    "bearer token": lambda b: f"Bearer {b}",
}

NEW_SHAPES = sorted(set(SHAPES) - {"openai project key", "anthropic key", "google key", "aws access key"} - {
    "github token", "github fine-grained token", "slack bot token", "bearer token"
})  # fmt: skip
"""The shapes no place caught before (the others were caught everywhere but split across interleaved deltas)."""

_bodies = st.text(alphabet=ALNUM, min_size=33, max_size=40)


def _tell(credential: str, body: str) -> str:
    """Twelve characters of ``credential`` that come from its secret body: they must not survive redaction."""
    for candidate in (body[:12], body[:12].upper()):
        if candidate in credential:
            return candidate
    return credential[-12:]


def _cassette(chunks: list[StreamChunk], request: RecordedRequest | None = None, outcome: object = None) -> Cassette:
    return Cassette(
        interactions=[
            Interaction(
                request=request or RecordedRequest.from_options(options("hi")),
                events=[Event(t_ns=n, chunk=chunk) for n, chunk in enumerate(chunks)],
                outcome=outcome or Completed(t_ns=len(chunks)),  # type: ignore[arg-type]
            )
        ]
    )


def _places(text: str) -> Iterator[tuple[str, Cassette]]:
    """``text`` in each place a cassette holds free text."""
    quoted = msgspec.json.encode({"note": text}).decode()
    yield "request message", _cassette(text_stream("ok"), RecordedRequest.from_options(options(f"see {text} ok")))
    call = ToolCallBlock(id=CallId("call_1"), name="f", arguments=quoted)
    assistant = Message(role="assistant", tool_calls=[call])
    history = GenerateOptions(model="m", messages=[Message(role="user", content="x"), assistant])
    yield "request tool-call arguments", _cassette(text_stream("ok"), RecordedRequest.from_options(history))
    spec = ToolSpec(name="f", description=f"uses {text}", parameters={"type": "object"})
    yield "tool spec", _cassette(text_stream("ok"), RecordedRequest.from_options(options("x", tools=[spec])))
    yield "extra", _cassette(text_stream("ok"), RecordedRequest.from_options(options("x", extra={"auth": text})))
    half = len(text) // 2
    yield "response text", _cassette(text_stream("here: ", text[:half], text[half:], " done"))
    reasoning: list[StreamChunk] = [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text=f"I saw {text}"),
    ]
    yield "reasoning cut short", _cassette(reasoning, outcome=Cancelled(t_ns=3))
    yield "tool arguments", _cassette(tool_stream("f", quoted[:9], quoted[9:]))
    yield "error message", _cassette([], outcome=Raised(t_ns=1, code="PROVIDER_HTTP_ERROR", message=f"bad {text}"))
    chunks = text_stream("ok")
    chunks[-1] = Finish(reason=FinishReason(kind="error", detail=f"upstream: {text}"))
    yield "finish detail", _cassette(chunks)


def _strings(cassette: Cassette) -> list[str]:
    """Every string a cassette shows, with each block's deltas reassembled (by index)."""
    plain = msgspec.json.encode(cassette).decode()
    streams: dict[tuple[int, str], str] = {}
    for interaction in cassette.interactions:
        for chunk in interaction.chunks:
            if isinstance(chunk, TextDelta | ReasoningDelta):
                key = (chunk.index, type(chunk).__name__)
                streams[key] = streams.get(key, "") + chunk.text
            elif isinstance(chunk, ToolCallDelta):
                streams[(chunk.index, "args")] = streams.get((chunk.index, "args"), "") + chunk.arguments_delta
    decoded = []
    for (_, kind), text in streams.items():
        if kind == "args":
            with contextlib.suppress(msgspec.DecodeError):  # cut short: the raw text is checked
                decoded.append(str(msgspec.json.decode(text)))
    return [plain, *streams.values(), *decoded]


@pytest.mark.parametrize("shape", NEW_SHAPES)
def test_every_known_shape_is_found_and_redacted_in_every_place(shape: str) -> None:
    credential = SHAPES[shape](BODY)
    for place, cassette in _places(credential):
        assert find_secrets(cassette), f"{shape} not found in {place}"
        cleaned = redact(cassette)
        assert find_secrets(cleaned) == [], f"{shape} still found in {place} after redaction"
        tell = _tell(credential, BODY)
        for text in _strings(cleaned):
            assert tell not in text, f"{shape} leaked from {place}: {text[:200]}"


def _interleaved(first: str, second: str, *, cut: bool) -> list[StreamChunk]:
    """Two parallel tool calls whose deltas alternate one character at a time; ``cut``: no block-end, no finish."""
    chunks: list[StreamChunk] = [
        BlockStart(index=0, block_type="tool-call"),
        BlockStart(index=1, block_type="tool-call"),
        ToolCallDelta(index=0, id=CallId("call_a"), name="f", arguments_delta=""),
        ToolCallDelta(index=1, id=CallId("call_b"), name="g", arguments_delta=""),
    ]
    for a, b in zip(first, second.ljust(len(first)), strict=False):
        chunks += [ToolCallDelta(index=0, arguments_delta=a), ToolCallDelta(index=1, arguments_delta=b.strip())]
    if not cut:
        chunks += [
            BlockEnd(index=0, block=ToolCallBlock(id=CallId("call_a"), name="f", arguments=first)),
            BlockEnd(index=1, block=ToolCallBlock(id=CallId("call_b"), name="g", arguments=second)),
        ]
    return chunks


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_interleaved_parallel_tool_calls_cut_before_block_end_do_not_hide_a_key(shape: str) -> None:
    """Split one character per delta, the two calls' deltas alternating, and no block-end (the stream was cut)."""
    arguments = msgspec.json.encode({"k": SHAPES[shape](BODY)}).decode()
    other = msgspec.json.encode({"city": "Paris, a pleasant place"}).decode()
    cassette = _cassette(_interleaved(arguments, other, cut=True), outcome=Cancelled(t_ns=9))
    assert find_secrets(cassette), shape
    cleaned = redact(cassette)
    assert find_secrets(cleaned) == []
    tell = _tell(SHAPES[shape](BODY), BODY)
    assert not any(tell in text for text in _strings(cleaned))


def _escape_all(text: str) -> str:
    return "".join(f"\\u{ord(char):04x}" for char in text)


@pytest.mark.parametrize(
    "encode",
    [
        lambda key: '{"key": "\\u0073' + key[1:] + '"}',
        lambda key: '{"key": "' + _escape_all(key) + '"}',
        lambda key: '{"key": "\\u0073' + key[1:],  # the stream stopped before the string closed
        lambda key: '{"key": "' + _b64(key) + '"}',
        lambda key: '{"auth": "' + _b64("me:" + key) + '"}',
    ],
    ids=["first-char-escaped", "all-escaped", "escaped-and-cut-off", "base64", "base64-of-user-colon-key"],
)
def test_an_escaped_or_base64_key_in_tool_arguments_is_found_and_redacted(encode: Callable[[str], str]) -> None:
    key = f"sk-proj-{BODY}"
    arguments = encode(key)
    third = len(arguments) // 3
    cassette = _cassette(tool_stream("f", arguments[:third], arguments[third : 2 * third], arguments[2 * third :]))
    assert find_secrets(cassette)
    cleaned = redact(cassette)
    assert find_secrets(cleaned) == []
    plain = msgspec.json.encode(cleaned).decode()
    assert BODY[:12] not in plain
    assert _escape_all(BODY[:4]) not in plain
    assert _b64(key)[:16] not in plain


def test_a_declared_secret_in_base64_is_found_and_redacted() -> None:
    secret = "hunter2-very-secret-value"
    cassette = _cassette(text_stream("config: ", _b64(f"password={secret}"), " end"))
    assert find_secrets(cassette, [secret])
    assert find_secrets(redact(cassette, [secret]), [secret]) == []


@pytest.mark.parametrize(
    "text",
    [
        "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed it",
        "id 123e4567-e89b-12d3-a456-426614174000",
        "a basic example of something",
        "Basic information about the laws and draws",
        "The AWS key is set in the console",
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
        "use the hf_transfer package and gsk_ prefixes",
        "src/chunktape/cassettes/redaction_and_more_words.py",
    ],
)
def test_ordinary_text_is_not_a_credential(text: str) -> None:
    assert find_secrets(_cassette(text_stream(text))) == []


# -- environment variables ------------------------------------------------------------------------------


def test_credential_env_names_match_in_any_position_and_trivial_values_are_skipped() -> None:
    value = "v4lue-long-enough"
    names = [
        "OPENAI_KEY",
        "API_KEY",
        "DEEPSEEK_APIKEY",
        "DB_PASSWORD",
        "OPENAI_API_KEY_2",
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
        "SMTP_PASSWD",
        "GOOGLE_CREDENTIALS",
        "my_secret",
    ]
    environ = dict.fromkeys(names, value)
    environ |= {"HOME": "/root/very/long/path", "SHORT_TOKEN": "abc1234", "FLAG_SECRET": "true"}
    environ |= {"RETRY_KEY": "12345678", "SIZE_TOKEN": "1_000_000.5", "NO_KEY": "disabled"}
    assert sorted(env_secrets(environ)) == sorted(names)


async def test_a_recorder_redacts_the_value_of_a_newly_covered_env_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DB_PASSWORD", "pw-0f-the-database")
    inner = PacedAdapter(paced(text_stream("it is pw-0f-", "the-database ok")))
    async with RecordingAdapter(inner, tmp_path / "c.msgpack") as recorder:
        await collect(recorder.stream(options("connect with pw-0f-the-database")))
    assert b"pw-0f-the-database" not in (tmp_path / "c.msgpack").read_bytes()


# -- the user hook ----------------------------------------------------------------------------------------


@pytest.fixture
def acme_pattern() -> Iterator[str]:
    from chunktape.secrets import register_pattern, unregister_pattern

    register_pattern("acme key", r"acme_[A-Za-z0-9]{24}")
    yield "acme_" + "Z9" * 12
    unregister_pattern("acme key")


async def test_a_registered_pattern_is_refused_by_the_recorder_and_redacted(tmp_path: Path, acme_pattern: str) -> None:
    inner = PacedAdapter(paced(text_stream("key: ", acme_pattern[:7], acme_pattern[7:])))
    with pytest.raises(LlmError) as caught:
        async with RecordingAdapter(inner, tmp_path / "c.msgpack") as recorder:
            await collect(recorder.stream(options()))
    assert caught.value.code is ErrorCode.SECRET_DETECTED
    assert "acme key" in caught.value.message
    assert not (tmp_path / "c.msgpack").exists()
    cleaned = redact(_cassette(text_stream("key: ", acme_pattern[:7], acme_pattern[7:])))
    assert acme_pattern[6:] not in msgspec.json.encode(cleaned).decode()


def test_an_unregistered_pattern_is_no_longer_searched(acme_pattern: str) -> None:
    from chunktape.secrets import register_pattern, unregister_pattern

    register_pattern("acme short", r"acme_(?P<secret>[0-9]{10})")
    cassette = _cassette(text_stream("id acme_0123456789"))
    assert any("acme short" in finding for finding in find_secrets(cassette))
    unregister_pattern("acme short")
    assert find_secrets(cassette) == []


def test_patterns_from_the_environment_are_searched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHUNKTAPE_REDACT_PATTERNS", '{"corp token": "corp-[0-9a-f]{16}"}')
    cassette = _cassette(text_stream("token corp-", "0123456789abcdef here"))
    assert any("corp token" in finding for finding in find_secrets(cassette))
    monkeypatch.setenv("CHUNKTAPE_REDACT_PATTERNS", '{"broken": "corp-[0-9"}')
    with pytest.raises(LlmError) as caught:
        find_secrets(cassette)
    assert caught.value.code is ErrorCode.INVALID_CONFIG


def test_a_built_in_shape_cannot_be_replaced_and_a_bad_regex_is_a_config_error() -> None:
    from chunktape.secrets import register_pattern

    for name, pattern in [("JSON web token", "x"), ("bad", "acme_[")]:
        with pytest.raises(LlmError) as caught:
            register_pattern(name, pattern)
        assert caught.value.code is ErrorCode.INVALID_CONFIG


# -- property: every shape, every place, every split, every encoding -----------------------------------------


_shape_names = st.sampled_from(sorted(SHAPES))
_encodings = st.sampled_from(["plain", "json-escaped", "base64"])
_words = picks(["ok", "the", "x=1", "\n", "{}", "é", "--", "_"], max_size=4)
_place_names = st.sampled_from(["message", "text", "reasoning", "arguments", "parallel", "error", "extra"])


@st.composite
def _secret_cassettes(draw: st.DrawFn) -> tuple[Cassette, list[str], str]:
    """A random interaction with one credential (of a drawn shape and encoding) at a random place and split."""
    shape = draw(_shape_names)
    body = draw(_bodies)
    credential = SHAPES[shape](body)
    tells = [_tell(credential, body)]
    encoding = draw(_encodings)
    words = draw(_words)
    before, after = " ".join(words[:2]) + " ", " " + " ".join(words[2:])
    if encoding == "base64":
        credential = _b64(credential)
        tells.append(credential[4:20])
    place = draw(_place_names)
    if encoding == "json-escaped" and place not in ("arguments", "parallel"):
        place = "arguments"  # \u escapes are JSON's: they stand for the key only inside a JSON string
    free = before + credential + after
    if encoding == "json-escaped":
        chars = msgspec.json.encode(free).decode()[1:-1]
        flips = draw(st.binary(min_size=len(chars), max_size=len(chars)))  # one choice, not a boolean a character
        escaped = "".join(f"\\u{ord(char):04x}" if flip & 1 else char for flip, char in zip(flips, chars, strict=True))
        arguments = '{"v": "' + escaped + '"}'
    else:
        arguments = msgspec.json.encode({"v": free}).decode()

    def split(text: str) -> list[str]:
        cuts = cut_points(draw, len(text), max_cuts=6, inner=True)
        return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True) if a < b] or [text]

    request = RecordedRequest.from_options(options("hello"))
    outcome: object = None
    cut = draw(st.booleans())
    chunks: list[StreamChunk]
    if place == "message":
        request = RecordedRequest.from_options(options(free))
        chunks = text_stream("ok")
    elif place == "extra":
        request = RecordedRequest.from_options(options("x", extra={"headers": {"authorization": free}}))
        chunks = text_stream("ok")
    elif place == "error":
        chunks, outcome = [], Raised(t_ns=1, code="PROVIDER_HTTP_ERROR", message=free)
    elif place == "parallel":
        chunks = _interleaved(arguments, '{"q": "weather in Paris"}', cut=cut)
    elif place == "arguments":
        chunks = tool_stream("f", *split(arguments))
    else:
        chunks = text_stream(*split(free)) if place == "text" else [BlockStart(index=0, block_type="reasoning")]
        if place == "reasoning":
            chunks += [ReasoningDelta(index=0, text=piece) for piece in split(free)]
    if place == "reasoning" or (cut and place in ("text", "arguments", "parallel")):
        chunks = chunks[:-3] if place in ("text", "arguments") else chunks  # no block-end, usage or finish
        outcome = Cancelled(t_ns=9)
    return _cassette(chunks, request, outcome), tells, f"{shape} ({encoding}) in {place}"


@settings(max_examples=250, deadline=None)
@given(case=_secret_cassettes())
def test_any_credential_anywhere_split_anyhow_is_found_and_redacted(case: tuple[Cassette, list[str], str]) -> None:
    cassette, tells, what = case
    assert find_secrets(cassette), what
    cleaned = redact(cassette)
    assert find_secrets(cleaned) == [], what
    for text in _strings(cleaned):
        assert not any(tell in text for tell in tells), what


@settings(max_examples=200, deadline=None)
@given(
    secret=st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc", "Zs"]), min_size=8, max_size=40),
    before=st.binary(max_size=60),
    after=st.binary(max_size=60),
    glued=st.sampled_from(["", "x", "ab", "key=", "Zm9v"]),
    urlsafe=st.booleans(),
    wrap=st.sampled_from([0, 64, 76]),  # PEM's and base64's columns
)
def test_a_literal_in_base64_is_found_at_any_alignment_without_decoding_the_run(
    secret: str, before: bytes, after: bytes, glued: str, urlsafe: bool, wrap: int
) -> None:
    """A scanner of literals only (a replay's redaction) finds their base64 by the characters the literal
    determines, not by decoding every run: the same finds, in any alignment, glued to a word, URL-safe, wrapped."""
    assume(secret not in REDACTED)  # a piece of the marker itself is never a secret (``scanner`` drops it)
    data = before + secret.encode() + after
    encoded = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data).decode()
    if wrap:
        encoded = "\n".join(encoded[i : i + wrap] for i in range(0, len(encoded), wrap))
    text = "data " + glued + encoded + " end"
    scan = scanner([secret], patterns=False)
    assert scan.may_hold(text)
    assert REDACTED in scan.redact(text)


def test_a_secret_that_is_not_utf8_text_is_still_found_plain_and_breaks_no_scanner() -> None:
    """An environment value with a byte that is not UTF-8 (a Latin-1 password) reaches Python as a lone surrogate."""
    secret = "\udcffabcdefghijk"
    for patterns in (False, True):
        assert scanner([secret], patterns=patterns).redact(f"pw {secret} end") == f"pw {REDACTED} end"


def test_a_run_mixing_both_base64_alphabets_is_read_as_decoding_reads_it() -> None:
    secret = "k~>?k~>?k~>?"
    mixed = base64.b64encode(b"x" + secret.encode()).decode().replace("/", "_", 1)
    assert "+" in mixed
    assert "_" in mixed
    assert scanner([secret], patterns=False).may_hold(f"a {mixed} b")
