"""Credentials where they are hard to see: keys glued to CJK text or a digit, AWS secrets as the AWS tools print
them, env values with a line end, ``\\u`` escapes after an odd quote, wrapped base64; and messages shown to
people (the plugin's failures, ``assert_all_played``) pass the one display redaction."""

from __future__ import annotations

import base64
import textwrap
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunktape import (
    Cassette,
    Completed,
    Event,
    Interaction,
    RecordedRequest,
    RecordingAdapter,
    ReplayAdapter,
    redact,
)
from chunktape._cassettes import find_secrets
from chunktape._secrets import REDACTED, scanner
from helpers import PacedAdapter, collect, options, paced, run_pytest, text_stream, tool_stream
from strategies import cut_points, picks
from test_pytest_plugin import project

BODY = "Qx7Lm2Np9Rt4Vw8Yz3Bc6Df1Gh5Jk0Ls"  # synthetic; 32 characters
KEY = f"sk-proj-{BODY}"
AWS_SECRET = "Qx7Lm2Np9R/t4Vw8Yz3Bc6+Df1Gh5Jk0LsAbCdEf"  # 40 characters, synthetic
SESSION = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQDqx7Lm2Np9R"  # synthetic


def _cassette(*interactions: Interaction) -> Cassette:
    return Cassette(interactions=list(interactions))


def _text(*pieces: str, content: str = "hello") -> Interaction:
    chunks = text_stream(*pieces)
    return Interaction(
        request=RecordedRequest.from_options(options(content)),
        events=[Event(t_ns=n, chunk=chunk) for n, chunk in enumerate(chunks)],
        outcome=Completed(t_ns=len(chunks)),
    )


def _arguments(*pieces: str) -> Interaction:
    chunks = tool_stream("f", *pieces)
    return Interaction(
        request=RecordedRequest.from_options(options("call f")),
        events=[Event(t_ns=n, chunk=chunk) for n, chunk in enumerate(chunks)],
        outcome=Completed(t_ns=len(chunks)),
    )


def _shown(cassette: Cassette) -> str:
    return msgspec.json.encode(cassette).decode()


def _found_and_gone(text: str, tell: str) -> None:
    """``text`` streamed in two deltas holds a credential (``tell`` is part of it): found, and redacted away."""
    half = len(text) // 2
    cassette = _cassette(_text(text[:half], text[half:], content=text))
    assert find_secrets(cassette), text
    cleaned = redact(cassette)
    assert find_secrets(cleaned) == []
    assert tell not in _shown(cleaned)


# -- 2. the start of a key ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [f"我的密钥是{KEY}，请检查", f"キーは{KEY}です", f"key1{KEY}"],
    ids=["chinese", "japanese", "after-a-digit"],
)
def test_a_key_glued_to_cjk_text_or_a_digit_is_found_and_redacted(text: str) -> None:
    _found_and_gone(text, BODY[:12])


@pytest.mark.parametrize(
    "text",
    ["密钥AKIAQX7LM2NP9RT4VW8Y。", f"鍵はAIza{BODY}xyz です", f"令牌ghp_{BODY}好"],
    ids=["aws-id-after-chinese", "google-after-japanese", "github-after-chinese"],
)
def test_a_short_prefix_after_a_non_ascii_letter_is_a_key(text: str) -> None:
    _found_and_gone(text, "QX7LM2NP9RT4" if "AKIA" in text else BODY[:12])


@pytest.mark.parametrize(
    "text",
    ["x1AKIAQX7LM2NP9RT4VW8Y", f"disk-{BODY}", f"task-{BODY}", f"QAIza{BODY}xyz", f"hugsxoxo-{BODY}"],
    ids=["aws-id-after-a-digit", "disk", "task", "google-after-a-letter", "xoxo-is-prose"],
)
def test_a_short_prefix_glued_to_an_ascii_word_is_not_a_key(text: str) -> None:
    assert find_secrets(_cassette(_text(text))) == []


# -- 3. AWS secrets as the AWS tools print them ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (
            f'{{"Credentials": {{"AccessKeyId": "ASIAQX7LM2NP9RT4VW8Y", "SecretAccessKey": "{AWS_SECRET}"}}}}',
            AWS_SECRET,
        ),
        (f'boto3.client("s3", aws_access_key_id=kid, secret_access_key="{AWS_SECRET}")', AWS_SECRET),
        (f"--secret-access-key={AWS_SECRET}", AWS_SECRET),
        (f'{{"SessionToken": "{SESSION}", "Expiration": "2025-01-01T00:00:00Z"}}', SESSION),
        (f"aws_session_token = {SESSION}==", SESSION),
        (f"AWS_SESSION_TOKEN={SESSION}", SESSION),
        (f"aws_security_token={SESSION}", SESSION),
    ],
    ids=[
        "sts-json-secret",
        "boto3-kwargs",
        "cli-flag",
        "sts-json-session-token",
        "credentials-file-session-token",
        "env-session-token",
        "legacy-security-token",
    ],
)
def test_aws_secrets_and_session_tokens_beside_their_name_are_found_and_redacted(text: str, value: str) -> None:
    findings = list(scanner().matches(text))
    assert any(found.found.rstrip("=") == value for found in findings), findings
    redacted = scanner().redact(text)
    assert value[:16] not in redacted
    assert value[-16:] not in redacted
    assert REDACTED in redacted
    _found_and_gone(text, value[:16])


def test_an_aws_secret_inside_a_json_string_of_tool_arguments_is_found() -> None:
    arguments = msgspec.json.encode({"config": f'{{"SecretAccessKey": "{AWS_SECRET}"}}'}).decode()
    assert '\\"SecretAccessKey\\": \\"' in arguments
    cassette = _cassette(_arguments(arguments[:20], arguments[20:]))
    assert find_secrets(cassette)
    assert AWS_SECRET[:16] not in _shown(redact(cassette))


def test_an_ordinary_session_or_secret_mention_is_not_a_credential() -> None:
    text = "the session token expires; set aws_secret_access_key in the console; secret: none"
    assert find_secrets(_cassette(_text(text))) == []


# -- 4. environment values with a line end ------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["Tr0ub4dor&3xyzzy\r", "  Tr0ub4dor&3xyzzy  ", "Tr0ub4dor&3xyzzy\n"])
async def test_an_env_secret_with_a_trailing_cr_or_spaces_is_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("DB_PASSWORD", raw)
    inner = PacedAdapter(paced(text_stream("it is Tr0ub4", "dor&3xyzzy ok")))
    async with RecordingAdapter(inner, tmp_path / "c.msgpack") as recorder:
        await collect(recorder.stream(options("connect with password Tr0ub4dor&3xyzzy please")))
    data = (tmp_path / "c.msgpack").read_bytes()
    assert b"Tr0ub4dor" not in data
    assert b"dor&3xyzzy" not in data


# -- 5. \u escapes wherever they are --------------------------------------------------------------------------


def _escaped_key() -> str:
    return "\\u0073\\u006b" + KEY[2:]


@pytest.mark.parametrize(
    "text",
    [
        f'my 12" screen shows {{"api_key": "{_escaped_key()}"}}',
        f'a " then {_escaped_key()} outside any string',
        f'"one" "two" " {_escaped_key()}',
    ],
    ids=["after-one-quote", "outside-a-string", "after-three-quotes"],
)
def test_a_unicode_escaped_key_after_an_odd_number_of_quotes_is_found_and_only_it_is_redacted(text: str) -> None:
    _found_and_gone(text, BODY[:12])
    redacted = scanner().redact(text)
    assert redacted == text.replace(_escaped_key(), REDACTED)  # the escapes that spelled it, nothing around


def test_an_escaped_surrogate_pair_maps_back_onto_its_escapes() -> None:
    text = '"\\ud83d\\ude00 ' + _escaped_key() + ' and more"'
    assert scanner().redact(text) == '"\\ud83d\\ude00 ' + REDACTED + ' and more"'


# -- 6. base64 wrapped over lines ------------------------------------------------------------------------------


def _wrapped(data: str, newline: str = "\n", width: int = 76) -> str:
    return newline.join(textwrap.wrap(base64.b64encode(data.encode()).decode(), width))


LONG_KEY = "sk-proj-" + BODY * 4


@pytest.mark.parametrize(
    "newline", ["\n", "\r\n"], ids=["lf", "crlf"]
)  # fmt: skip
def test_base64_wrapped_at_76_columns_is_redacted_whole(newline: str) -> None:
    wrapped = _wrapped(f"OPENAI_API_KEY={LONG_KEY}\n", newline)
    assert wrapped.count(newline) >= 2
    text = f"decode this:{newline}{wrapped}{newline}thanks"
    redacted = scanner().redact(text)
    assert redacted == f"decode this:{newline}{REDACTED}={newline}thanks"
    half = len(text) // 2
    cleaned = redact(_cassette(_text(text[:half], text[half:])))
    assert find_secrets(cleaned) == []
    for line in wrapped.split(newline):
        assert line.rstrip("=")[:20] not in _shown(cleaned)


def test_wrapped_base64_inside_tool_arguments_is_redacted_whole() -> None:
    arguments = msgspec.json.encode({"file": _wrapped(f"token: {LONG_KEY}\n")}).decode()
    assert "\\n" in arguments
    cassette = _cassette(_arguments(arguments[:50], arguments[50:]))
    assert find_secrets(cassette)
    cleaned = redact(cassette)
    (interaction,) = cleaned.interactions
    shown = msgspec.json.decode(interaction.chunks[-3].block.arguments)  # type: ignore[union-attr]
    assert shown == {"file": REDACTED + "=" * (len(shown["file"]) - len(REDACTED))}
    assert shown["file"].endswith(("]", "=")), shown


def test_a_literal_secret_longer_than_57_bytes_is_found_in_wrapped_base64() -> None:
    secret = "correct-horse-battery-staple-" * 3
    wrapped = _wrapped(f"password={secret}")
    assert "\n" in wrapped
    assert list(scanner([secret]).matches(wrapped))
    cassette = _cassette(_text("creds:\n", wrapped))
    assert find_secrets(cassette, [secret])
    assert find_secrets(redact(cassette, [secret]), [secret]) == []


def test_wrapped_base64_glued_to_a_word_is_still_one_run() -> None:
    """The first line may be glued to a word before it (``ok`` + 76 columns): the lines after it still join."""
    wrapped = _wrapped(f"OPENAI_API_KEY={LONG_KEY}\n")
    redacted = scanner().redact(f"ok{wrapped}\nbye")
    assert redacted.startswith(REDACTED)
    assert redacted.endswith("\nbye")
    assert "\n" not in redacted.removesuffix("\nbye")


# -- property: the review's classes, drawn ---------------------------------------------------------------------

_bodies = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789", min_size=33, max_size=40)

CLASSES: dict[str, Callable[[str], tuple[str, str]]] = {
    # each: a body -> (the text holding a credential, a piece of it that must not survive)
    "glued to chinese": lambda b: (f"我的密钥是sk-proj-{b}，请检查", b[:12]),
    "glued to japanese": lambda b: (f"キーはsk-ant-api03-{b}です", b[:12]),
    "after a digit": lambda b: (f"key1sk-proj-{b}", b[:12]),
    "aws id after chinese": lambda b: (f"密钥AKIA{b[:16].upper()}。", b[:16].upper()),
    "sts json": lambda b: (f'{{"SecretAccessKey": "{(b * 2)[:40]}"}}', (b * 2)[:16]),
    "boto3 kwargs": lambda b: (f'client(secret_access_key="{(b * 2)[:38]}/+")', (b * 2)[:16]),
    "session token": lambda b: (f'{{"SessionToken": "IQoJb3JpZ2lu{b}{b}"}}', b[:16]),
    "escaped after an odd quote": lambda b: (f'a 12" screen: "\\u0073\\u006b-proj-{b}"', b[:12]),
    "wrapped base64": lambda b: (_wrapped(f"OPENAI_API_KEY=sk-proj-{b * 4}\n"), ""),
}


_class_names = st.sampled_from(sorted(CLASSES))
_words = picks(["ok", "的", "x=1", "\n", "{}", "é", "--", "_", '"'], max_size=4)
_places = st.sampled_from(["message", "text", "arguments"])


@st.composite
def _review_cases(draw: st.DrawFn) -> tuple[Cassette, list[str], str]:
    name = draw(_class_names)
    body = draw(_bodies)
    credential, tell = CLASSES[name](body)
    tells = [tell] if tell else [line[:20] for line in credential.splitlines()]
    words = draw(_words)
    free = "".join(words[:2]) + credential + "".join(words[2:])
    place = draw(_places)
    cuts = cut_points(draw, len(free), max_cuts=5, inner=True)
    if place == "message":
        interaction = _text("ok", content=free)
    elif place == "text":
        interaction = _text(*[free[a:b] for a, b in zip([0, *cuts], [*cuts, len(free)], strict=True)])
    else:
        arguments = msgspec.json.encode({"v": free}).decode()
        cuts = sorted({min(cut, len(arguments) - 1) for cut in cuts})
        pieces = [arguments[a:b] for a, b in zip([0, *cuts], [*cuts, len(arguments)], strict=True) if a < b]
        interaction = _arguments(*pieces)
    return _cassette(interaction), tells, f"{name} in {place}"


@settings(max_examples=150, deadline=None)
@given(case=_review_cases())
def test_the_reviewed_classes_anywhere_split_anyhow_are_found_and_redacted(
    case: tuple[Cassette, list[str], str],
) -> None:
    cassette, tells, what = case
    assert find_secrets(cassette), what
    cleaned = redact(cassette)
    assert find_secrets(cleaned) == [], what
    shown = _shown(cleaned)
    streamed = "".join(
        getattr(chunk, "text", "") or getattr(chunk, "arguments_delta", "")
        for interaction in cleaned.interactions
        for chunk in interaction.chunks
    )
    for tell in tells:
        assert tell not in shown, what
        assert tell not in streamed, what


# -- messages shown to people ----------------------------------------------------------------------------------


def test_assert_all_played_masks_a_credential_of_a_recorded_request() -> None:
    """A cassette may keep a value it was allowed to keep: the message that quotes its request masks it."""
    replay = ReplayAdapter(_cassette(_text("hi", content=f"use {KEY} now")))
    with pytest.raises(AssertionError) as caught:
        replay.assert_all_played()
    shown = str(caught.value)
    assert "never played" in shown
    assert BODY[:8] not in shown
    assert REDACTED in shown


def test_the_plugins_failure_messages_mask_credentials(pytester: pytest.Pytester) -> None:
    """``pytest.fail`` messages quote the user's values (here the fixture's return value): masked."""
    project(
        pytester,
        test_leak=f"""
        import pytest

        @pytest.fixture
        def tape_live_adapter():
            return {{"api_key": "{KEY}"}}

        async def test_it(tape):
            pass
        """,
    )
    result = run_pytest(pytester, "--tape-mode", "once")
    result.assert_outcomes(errors=1)
    output = result.stdout.str()
    assert "tape_live_adapter must return an LlmAdapter" in output
    assert BODY[:8] not in output
    assert REDACTED in output
