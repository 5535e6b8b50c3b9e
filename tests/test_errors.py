"""LlmError codes are a public contract: pinned here, extended only at the end."""

from __future__ import annotations

import pickle

import pytest

from chunktape import Advice, ErrorCode, LlmError, ProtocolViolation

# Released codes. A code may be appended to this list, never renamed or removed.
RELEASED_CODES = [
    "PROVIDER_HTTP_ERROR",
    "STREAM_ABORTED",
    "TIMEOUT",
    "CANCELLED",
    "PROTOCOL_VIOLATION",
    "UNSUPPORTED_OPTION",
    "INVALID_RESPONSE",
    "CASSETTE_NOT_FOUND",
    "CASSETTE_MISMATCH",
    "CASSETTE_EXHAUSTED",
    "CASSETTE_CORRUPT",
    "CASSETTE_VERSION",
    "SECRET_DETECTED",
    "INVALID_CONFIG",
    "SCRIPT_EXHAUSTED",
    "CASSETTE_UNWRITABLE",
    "CASSETTE_STALE",
]


def test_released_codes_are_never_renamed_or_removed() -> None:
    current = [code.value for code in ErrorCode]
    assert current[: len(RELEASED_CODES)] == RELEASED_CODES
    assert all(code.name == code.value for code in ErrorCode)


@pytest.mark.parametrize(
    ("code", "status", "recoverable"),
    [
        ("PROVIDER_HTTP_ERROR", 408, True),
        ("PROVIDER_HTTP_ERROR", 429, True),
        ("PROVIDER_HTTP_ERROR", 500, True),
        ("PROVIDER_HTTP_ERROR", 503, True),
        ("PROVIDER_HTTP_ERROR", 599, True),
        ("PROVIDER_HTTP_ERROR", 400, False),
        ("PROVIDER_HTTP_ERROR", 401, False),
        ("PROVIDER_HTTP_ERROR", 402, False),
        ("PROVIDER_HTTP_ERROR", 422, False),
        ("PROVIDER_HTTP_ERROR", None, False),
        ("STREAM_ABORTED", None, True),
        ("TIMEOUT", None, True),
        ("CANCELLED", None, False),
        ("PROTOCOL_VIOLATION", None, False),
        ("CASSETTE_MISMATCH", None, False),
    ],
)
def test_recoverable_follows_code_and_status(code: str, status: int | None, recoverable: bool) -> None:
    assert LlmError("x", code, status=status).recoverable is recoverable


def test_str_starts_with_the_code_and_says_what_to_do_next() -> None:
    error = LlmError(
        "tests/cassettes/test_agent/test_hello.msgpack does not exist", "CASSETTE_NOT_FOUND", advice=Advice.RECORD
    )
    assert str(error) == (
        "[CASSETTE_NOT_FOUND] tests/cassettes/test_agent/test_hello.msgpack does not exist; "
        'record it: use_cassette(path, live=..., mode="once")'
    )
    assert str(LlmError("slow down", "PROVIDER_HTTP_ERROR", status=429)).startswith(
        "[PROVIDER_HTTP_ERROR] slow down (HTTP 429); "
    )
    assert str(LlmError("x", "TIMEOUT", hint="wait longer")) == "[TIMEOUT] x; wait longer"


def test_every_code_has_a_next_step() -> None:
    for code in ErrorCode:
        assert "; " in str(LlmError("something happened", code)), code


def test_unknown_code_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown LlmError code 'NOPE'; valid codes: PROVIDER_HTTP_ERROR, "):
        LlmError("x", "NOPE")


def test_fields_and_cause_are_kept() -> None:
    cause = ConnectionResetError("reset")
    error = LlmError("rate limited", ErrorCode.PROVIDER_HTTP_ERROR, status=429, retry_after=2.5, cause=cause)
    assert (error.code, error.status, error.retry_after, error.cause) == ("PROVIDER_HTTP_ERROR", 429, 2.5, cause)
    assert error.__cause__ is cause
    assert repr(error) == "LlmError('rate limited', 'PROVIDER_HTTP_ERROR', status=429, retry_after=2.5)"


def test_errors_survive_pickling_for_xdist_and_multiprocessing() -> None:
    error = LlmError("rate limited", "PROVIDER_HTTP_ERROR", status=429, retry_after=1.0, hint="wait")
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.code, clone.message, clone.status, clone.retry_after, str(clone)) == (
        error.code,
        error.message,
        429,
        1.0,
        str(error),
    )
    violation = pickle.loads(pickle.dumps(ProtocolViolation("finish-last", 7, "usage after finish")))
    assert (violation.rule, violation.position, violation.code) == ("finish-last", 7, "PROTOCOL_VIOLATION")
