"""Cassettes: the recorded-session file format, its codec, store and crash journal, request matching and secret
redaction."""

from chunktape.cassettes.codec import MIGRATIONS, LazyCassette, load_cassette, open_cassette
from chunktape.cassettes.journal import journal_path, recover
from chunktape.cassettes.matching import DEFAULT_MATCH, MATCHERS, Matcher, MatchOn, RequestMatcher
from chunktape.cassettes.model import (
    FORMAT_VERSION,
    MAX_GAP_NS,
    Cancelled,
    Cassette,
    CassetteMeta,
    Completed,
    Event,
    Interaction,
    Outcome,
    Raised,
    RecordedRequest,
)
from chunktape.cassettes.redaction import REDACTED, check_secrets, env_secrets, find_secrets, redact
from chunktape.cassettes.store import save_cassette

__all__ = [
    "Cancelled",
    "Cassette",
    "CassetteMeta",
    "Completed",
    "DEFAULT_MATCH",
    "Event",
    "FORMAT_VERSION",
    "Interaction",
    "LazyCassette",
    "MATCHERS",
    "MAX_GAP_NS",
    "MIGRATIONS",
    "MatchOn",
    "Matcher",
    "Outcome",
    "REDACTED",
    "Raised",
    "RecordedRequest",
    "RequestMatcher",
    "check_secrets",
    "env_secrets",
    "find_secrets",
    "journal_path",
    "load_cassette",
    "open_cassette",
    "recover",
    "redact",
    "save_cassette",
]
