"""``Retry-After`` and provider error bodies are read once (``chunktape.wire._http_errors``), sanely."""

from __future__ import annotations

import email.utils

import pytest

from chunktape import ErrorCode
from chunktape.wire._http_errors import (
    MAX_RETRY_AFTER,
    error_from_payload,
    http_error,
    not_an_event_stream,
    parse_retry_after,
    parse_retry_after_ms,
    retry_after_from_headers,
)

NOW = 1_764_681_305.0


def http_date(timestamp: float) -> str:
    return email.utils.formatdate(timestamp, usegmt=True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("7", 7.0), (" 120 ", 120.0), ("1.5", 1.5), ("0", 0.0), (".5", 0.5), ("999999999", MAX_RETRY_AFTER)],
)
def test_delay_seconds(value: str, expected: float) -> None:
    assert parse_retry_after(value, now=NOW) == expected


@pytest.mark.parametrize(
    "value", [None, "", "  ", "nan", "NaN", "inf", "-inf", "Infinity", "-1", "1e3", "+5", "soon", "Wed, 99 Foo"]
)
def test_garbage_is_none(value: str | None) -> None:
    assert parse_retry_after(value, now=NOW) is None


def test_http_dates_are_relative_to_now_and_capped() -> None:
    assert parse_retry_after(http_date(NOW + 90), now=NOW) == 90.0
    assert parse_retry_after(http_date(NOW - 90), now=NOW) == 0.0
    assert parse_retry_after("Wed, 21 Oct 2099 07:28:00 GMT", now=NOW) == MAX_RETRY_AFTER
    minus_zero = http_date(NOW + 30).replace("GMT", "-0000")
    assert parse_retry_after(minus_zero, now=NOW) == 30.0


def test_retry_after_ms_and_header_lookup() -> None:
    assert parse_retry_after_ms("1500") == 1.5
    assert parse_retry_after_ms("nan") is None
    assert parse_retry_after_ms("1e20") is None
    assert parse_retry_after_ms("99999999999") == MAX_RETRY_AFTER
    assert retry_after_from_headers({"Retry-After-Ms": "250", "Retry-After": "9"}) == 0.25
    assert retry_after_from_headers({"retry-after-ms": "junk", "RETRY-AFTER": ["9"]}) == 9.0
    assert retry_after_from_headers({"retry-after": [http_date(NOW + 60)]}, now=NOW) == 60.0
    assert retry_after_from_headers({"retry-after": "inf"}) is None
    assert retry_after_from_headers(None) is None


def test_http_error_reads_json_whatever_the_type_and_falls_back_to_text() -> None:
    error = http_error(429, b'{"error": {"message": "Rate Limit Reached"}}', {"retry-after": "7"}, who="deepseek")
    assert error.code is ErrorCode.PROVIDER_HTTP_ERROR
    assert (error.status, error.retry_after) == (429, 7.0)
    assert "Rate Limit Reached" in error.message
    plain = http_error(502, b"upstream connect error\n")
    assert plain.message == "the provider answered HTTP 502: upstream connect error"
    assert plain.retry_after is None


def test_http_error_message_starts_with_the_providers_words_and_takes_retry_after_from_the_body() -> None:
    body = b'{"error": {"message": "Rate Limit Reached", "type": "rate_limit_error", "retry_after": 5}}'
    error = http_error(429, body, {}, who="deepseek")
    assert error.message == "Rate Limit Reached (rate_limit_error; deepseek answered HTTP 429)"
    assert error.retry_after == 5.0
    assert http_error(429, body, {"retry-after": "2"}).retry_after == 2.0  # the header wins


def test_error_from_payload_plain_text_and_bare_objects() -> None:
    assert error_from_payload("boom").message == "boom (the provider reported an error)"
    error = error_from_payload({"message": "overloaded", "retryAfter": 30}, what="x")
    assert (error.code, error.message, error.retry_after) == (ErrorCode.STREAM_ABORTED, "overloaded (x)", 30.0)
    assert error_from_payload({"error": {"message": "m", "retry_after": -3}}).retry_after is None
    assert error_from_payload({"error": {"message": "m", "retry_after": True}}).retry_after is None


def test_not_an_event_stream_names_what_the_endpoint_should_stream() -> None:
    error = not_an_event_stream(b"<html>login</html>", "text/html", streams="messages")
    assert error.code is ErrorCode.INVALID_RESPONSE
    assert "'<html>login</html>'" in error.message
    assert error.hint is not None
    assert error.hint.endswith("streams messages")
    default = not_an_event_stream(b"<html/>", None)
    assert default.hint == "check the base URL (a proxy or login page?) and that the endpoint streams chat completions"
