"""Cassettes: the recorded-session file format, its codec, store and crash journal, request matching and secret
redaction."""

from chunktape._cassettes.codec import MIGRATIONS, LazyCassette, load_cassette, open_cassette
from chunktape._cassettes.journal import journal_path, recover
from chunktape._cassettes.matching import DEFAULT_MATCH, MATCHERS, Matcher, MatchOn, RequestMatcher
from chunktape._cassettes.model import (
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
from chunktape._cassettes.redaction import REDACTED, check_secrets, env_secrets, find_secrets, redact
from chunktape._cassettes.store import save_cassette

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
