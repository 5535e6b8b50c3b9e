"""What a credential looks like, and the one redaction of credentials from anything stored or shown.

On a low floor (it imports only ``errors``) so that providers, cassettes, matching, the server and the CLI all
use the same search. Credentials are literal values (an adapter's ``secrets``, ``env_secrets()``) and
key-shaped strings (``KEY_PATTERNS``, extensible with ``register_pattern`` or ``CHUNKTAPE_REDACT_PATTERNS``).
A text is also searched through two encodings people paste keys in: ``\\u`` escapes, decoded wherever they are
(a hit covers the escapes that spell it), and base64 runs, also wrapped over lines (``Basic`` values, encoded
config; a hit covers the whole run).

A key with a short prefix (``AKIA``, ``AIza``, ``sk-``) must not follow an ASCII letter or digit (``task-...`` is
not a key), but may follow anything else: ``_``, punctuation, a JSON escape, or Chinese text (``我的密钥是sk-...``).
A distinctive prefix (``sk-proj-``, ``github_pat_``) may follow anything. Redaction runs to a fixed point, so
replacing one credential never makes a new one appear (``...789sk-`` becomes ``[REDACTED]sk-``, which is itself
a key-shaped start).

``detect-secrets`` was measured as the alternative (see the i11 report): its plugins miss ``sk-proj-``,
``sk-ant-``, ``AIza``, ``hf_``, ``gsk_``, ``xai-``, ``xapp-``, ``Basic`` values and base64 of a key, and it scans
a 100,000-chunk cassette in about 30 s against 15 ms here, so the patterns below are written out, each
citing where its shape comes from.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import functools
import html
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

import msgspec

from chunktape._errors import ErrorCode, LlmError

__all__ = [
    "CREDENTIAL_HEADERS",
    "ENV_PATTERNS",
    "Found",
    "KEY_PATTERNS",
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "Scanner",
    "env_secrets",
    "is_credential_name",
    "is_credential_param",
    "is_credential_value",
    "mask",
    "redact_text",
    "redact_url",
    "register_pattern",
    "scanner",
    "unregister_pattern",
    "url_secrets",
    "usable",
]

REDACTED = "[REDACTED]"
CREDENTIAL_HEADERS: tuple[str, ...] = (
    "authorization",
    "api-key",
    "x-api-key",
    "proxy-authorization",
    "openai-organization",
    "openai-project",
    "cookie",
    "set-cookie",
)
"""The headers that carry credentials or cookies (lower case): never kept in a recording, whatever else is."""
MIN_SECRET_LENGTH = 8
"""Shorter values (``TOKEN=1``) are too likely to occur by chance to be treated as secrets."""

_ASCII_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_START = r"(?:(?<![A-Za-z0-9])|(?<=\\[bfnrt]))"
"""Where a short-prefixed key may start: not right after an ASCII letter or digit (``task-...``, ``1AKIA...``),
or right after a JSON escape. Any other character may come first: Chinese and Japanese put no space before a
key (``我的密钥是sk-...``), nor does ``clé:``."""
_END = r"(?![A-Za-z0-9])"


class _Shape(NamedTuple):
    pattern: re.Pattern[str]
    """The whole shape, as ``KEY_PATTERNS`` shows it."""
    needles: tuple[str, ...]
    """Substrings every match contains: text holding none of them skips the regex (empty: always run it)."""
    check: Callable[[str], bool] | None = None
    """A second look at what matched (``Basic`` values must decode to ``user:password``)."""
    search: re.Pattern[str] | None = None
    """``pattern`` without its leading ``_START``, which is checked in Python instead: a regex that starts
    with a lookbehind is tried at every position, one that starts with a literal is found at C speed."""
    anywhere: tuple[str, ...] = ()
    """Prefixes distinctive enough to start a key right after anything, even a letter (``key1sk-proj-...``)."""


def _key(
    body: str,
    needles: tuple[str, ...],
    check: Callable[[str], bool] | None = None,
    *,
    anywhere: tuple[str, ...] = (),
) -> _Shape:
    """A key shape that must start clean (see ``_START``), unless it starts with one of ``anywhere``."""
    start = _START if not anywhere else f"(?:(?={'|'.join(map(re.escape, anywhere))})|{_START})"
    return _Shape(re.compile(start + body), needles, check, re.compile(body), anywhere)


def _clean_start(text: str, start: int) -> bool:
    """``_START`` at ``start``: not right after an ASCII letter or digit, unless that is the letter of a JSON escape."""
    if start == 0 or text[start - 1] not in _ASCII_ALNUM:
        return True
    return start >= 2 and text[start - 2] == "\\" and text[start - 1] in "bfnrt"


def _basic_credentials(found: str) -> bool:
    token = found.split()[-1]
    try:
        decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded and decoded.isascii() and decoded.decode().isprintable()


def _named(name: str, value: str) -> re.Pattern[str]:
    """A credential told apart by the name before it: ``name``, a separator (``=``, ``: "``, also escaped inside
    a JSON string: ``\\": \\"``), then ``value``, the ``secret`` group (the name stays readable)."""
    separator = r"[A-Za-z0-9_.\- ]{0,20}?\\?[\"']?\s*[:=]\s*\\?[\"']?"
    return re.compile(f"{name}{separator}(?P<secret>{value})(?![A-Za-z0-9/+=])")


def _spellings(*words: str) -> tuple[str, ...]:
    """Needles for a name the regex takes in any case: its usual spellings (``secret_access_key``,
    ``SECRET_ACCESS_KEY``, ``SecretAccessKey``, ``secret-access-key``...), less the first letter (``s`` or ``S``).
    A case-insensitive screen would be slower than the whole scan."""
    forms = {
        (case(words[0]) + sep + sep.join(case(word) for word in words[1:]))[1:]
        for sep in ("_", "-", "")
        for case in (str.lower, str.upper, str.capitalize)
    }
    return tuple(sorted(forms))


def _random_looking(value: str) -> bool:
    """A 40-character value that reads as random base64: not hex digits alone (a commit hash), and holding at least
    two of upper-case letters, lower-case letters, digits and ``/+``."""
    if re.fullmatch(r"[0-9a-f]+|[0-9A-F]+", value):
        return False
    classes = (str.isupper, str.islower, str.isdigit, lambda char: char in "/+")
    return sum(any(kind(char) for char in value) for kind in classes) >= 2


_QUERY_WORDS = (
    "key", "token", "secret", "password", "passwd", "pwd", "credential", "credentials", "sig", "signature", "auth"
)  # fmt: skip
"""A URL query parameter whose name ends in one of these holds a credential (``is_credential_param``)."""


_BUILTIN: dict[str, _Shape] = {
    # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-), DeepSeek, OpenRouter (sk-or-): the providers' key formats
    "api key (sk-...)": _key(
        r"sk-[A-Za-z0-9_\-]{20,}", ("sk-",), anywhere=("sk-proj-", "sk-ant-", "sk-or-", "sk-svcacct-", "sk-admin-")
    ),
    # GitHub's documented token prefixes (github.blog, "Behind GitHub's new authentication token formats")
    "GitHub token": _key(
        r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        anywhere=("github_pat_",),
    ),
    # AWS key ids: AKIA long-term, ASIA STS session, ABIA/ACCA (gitleaks rule aws-access-token)
    "AWS access key": _key(r"(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}" + _END, ("AKIA", "ASIA", "ABIA", "ACCA")),
    # 40 base64 characters are only told apart by the name next to them (detect-secrets' AWSKeyDetector), as the
    # AWS tools print it: "SecretAccessKey": (sts, iam JSON), secret_access_key= (boto3), aws_secret_access_key
    # (credentials files, env), in any case; the name may end a longer word (awsSecretAccessKey, mySecretKey)
    "AWS secret access key": _Shape(
        _named(
            r"(?:(?i:secret[_\-]?(?:access[_\-]?)?key)"
            r"|(?:AWS|Aws|aws(?=[_.\-SK]))[A-Za-z0-9_.\- ]{0,20}?(?i:secret|key))",
            "[A-Za-z0-9/+]{40}",
        ),
        ("AWS", "Aws", "aws_", "aws.", "aws-", "awsS", "awsK", *_spellings("secret", "access", "key")),
    ),
    # detect-secrets' AWSKeyDetector (1.5): ``aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?['"]<40>['"]``,
    # case-insensitive; here the value may follow its label by up to 64 characters of anything, line breaks
    # included (a label in one line or chunk and the value in the next, a remark between them; a line break may be
    # a JSON escape, as tool arguments hold one), quoted or not.
    # So loose a rule needs a value that looks random: not hex alone (a commit hash), two classes of character.
    "AWS secret access key (labelled)": _Shape(
        re.compile(
            r"(?is:aws.{0,20}?(?:key|pwd|pw|password|pass|token)|secret[_\-]?(?:access[_\-]?)?key)"
            r"[\s\S]{0,64}?(?:(?<![A-Za-z0-9/+])|(?<=\\[nrt]))(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        ("AWS", "Aws", "aws", *_spellings("secret", "access", "key"), *_spellings("secret", "key")),
        check=lambda found: _random_looking(found[-40:]),
    ),
    # STS session tokens ("SessionToken": "IQoJb3JpZ2lu..." from assume-role, aws_session_token, the older
    # aws_security_token): long base64, told apart by their name as well
    "AWS session token": _Shape(
        _named(r"(?i:se(?:ssion|curity)[_\-]?token)", "[A-Za-z0-9/+]{40,}=*"),
        (*_spellings("session", "token"), *_spellings("security", "token")),
    ),
    # Google Cloud API keys (gitleaks gcp-api-key)
    "Google API key": _key(r"AIza[0-9A-Za-z_\-]{35}", ("AIza",)),
    # Slack bot/user/app tokens (api.slack.com/authentication/token-types; gitleaks slack-app-token)
    "Slack token": _key(
        r"(?:xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-[0-9]-[A-Za-z0-9\-]{10,})",
        ("xox", "xapp-"),
        anywhere=("xoxb-", "xoxp-", "xapp-"),  # not xoxo-, which is prose
    ),
    # incoming webhooks carry their secret in the path (gitleaks slack-webhook-url)
    "Slack webhook URL": _Shape(
        re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_\-]{20,}"), ("hooks.slack.com",)
    ),
    # RFC 7519 header.payload.signature, both base64url of a JSON object (gitleaks jwt)
    "JSON web token": _key(r"eyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]*", ("eyJ",)),
    # Stripe secret and restricted keys (docs.stripe.com/keys; gitleaks stripe-access-token)
    "Stripe key": _key(r"[sr]k_(?:live|test|prod)_[A-Za-z0-9]{20,}", ("k_live_", "k_test_", "k_prod_")),
    # Hugging Face user and org tokens (gitleaks huggingface-access-token, -organization-api-token)
    "Hugging Face token": _key(r"(?:hf_|api_org_)[A-Za-z0-9]{30,}", ("hf_", "api_org_")),
    # Groq (console.groq.com keys: gsk_ + 52) and xAI (console.x.ai keys: xai- + 80)
    "Groq key": _key(r"gsk_[A-Za-z0-9]{20,}", ("gsk_",)),
    "xAI key": _key(r"xai-[A-Za-z0-9]{20,}", ("xai-",)),
    # GitLab personal access tokens, npm and PyPI upload tokens (gitleaks gitlab-pat, npm-access-token, pypi)
    "GitLab token": _key(r"glpat-[A-Za-z0-9_\-]{20,}", ("glpat-",), anywhere=("glpat-",)),
    "npm token": _key(r"npm_[A-Za-z0-9]{36}", ("npm_",)),
    "PyPI token": _key(r"pypi-AgE[A-Za-z0-9_\-]{50,}", ("pypi-AgE",), anywhere=("pypi-AgE",)),
    # a URL's query parameter named like a credential (``?api_key=``, ``&access_token=``, ``&sig=``): as vcrpy's
    # filter_query_parameters and Azure's SAS ``sig`` put them; the value up to the next parameter
    "URL query credential": _Shape(
        re.compile(
            r"[?&;](?:[A-Za-z0-9_.\-]*?(?i:key|token|secret|password|passwd|pwd|credentials?|sig|signature|auth))="
            r"(?P<secret>[^&#\s\"'<>\\\[\]]{8,})"
        ),
        tuple(f"{case(word)}=" for word in _QUERY_WORDS for case in (str.lower, str.upper, str.capitalize)),
        check=lambda found: is_credential_value(found.partition("=")[2]),
    ),
    # RFC 7468 PEM; up to the END line, or to where the key body stops (a stream cut short)
    "private key": _Shape(
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?:[A-Za-z0-9+/=\s:,\-]|\\[nr])*?"
            r"(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|(?![A-Za-z0-9+/=\s:,\-]|\\[nr]))"
        ),
        ("PRIVATE KEY",),
    ),
    # RFC 6750 and RFC 7617 Authorization values
    "bearer token": _key(r"[Bb]earer\s+[A-Za-z0-9._~+/\-]{20,}=*", ("earer",)),
    # "Basic " as headers write it: the lower-case word is too common in prose to screen for
    "basic auth": _key(r"Basic +[A-Za-z0-9+/]{8,}={0,2}" + _END, ("Basic ",), check=_basic_credentials),
}

KEY_PATTERNS: dict[str, re.Pattern[str]] = {name: shape.pattern for name, shape in _BUILTIN.items()}
"""The key shapes searched for, by label (built in and registered); read-only, use ``register_pattern``."""
_shapes: dict[str, _Shape] = dict(_BUILTIN)
_generation = 0
"""Bumped by ``register_pattern``, so cached scanners see the new shape."""

ENV_PATTERNS = "CHUNKTAPE_REDACT_PATTERNS"
"""Environment variable holding more key shapes as a JSON object ``{"label": "regex", ...}`` (for the CLI and CI)."""


def _literal_prefix(source: str) -> str:
    """The literal text a regex source starts with (``acme_[a-z]{32}`` -> ``acme_``): a needle for the screen."""
    prefix: list[str] = []
    for char in source:
        if char in ".^$*+?{}[]\\|()":
            if char in "*?{" and prefix:
                prefix.pop()  # the last literal is optional or repeated
            break
        prefix.append(char)
    return "".join(prefix)


def register_pattern(name: str, pattern: str | re.Pattern[str], *, needles: Sequence[str] = ()) -> None:
    """Add (or replace) a key shape, labelled ``name``, that every scan and redaction looks for from now on.

    ``needles`` are literal substrings every match contains; text without any of them skips the regex, which
    keeps saving fast. By default the literal start of the regex is used; a regex without one (or
    case-insensitive) is run on every text. A named group ``secret`` limits the credential to that part of
    the match (``password=(?P<secret>...)`` keeps the name visible).
    """
    global _generation
    if name in _BUILTIN:
        raise LlmError(
            f"{name!r} is a built-in key shape; register yours under another label", ErrorCode.INVALID_CONFIG
        )
    try:
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
    except re.error as exc:
        raise LlmError(f"secret pattern {name!r} is not a valid regex: {exc}", ErrorCode.INVALID_CONFIG) from None
    if not needles and not compiled.flags & re.IGNORECASE:
        prefix = _literal_prefix(compiled.pattern)
        needles = (prefix,) if len(prefix) >= 2 else ()
    _shapes[name] = _Shape(compiled, tuple(needles))
    KEY_PATTERNS[name] = compiled
    _generation += 1


def unregister_pattern(name: str) -> None:
    """Take back a shape ``register_pattern`` added; other names are ignored."""
    global _generation
    if name in _BUILTIN or name not in _shapes:
        return
    del _shapes[name], KEY_PATTERNS[name]
    _generation += 1


_env_loaded: tuple[str, dict[str, _Shape]] = ("", {})


def _env_shapes() -> dict[str, _Shape]:
    """The shapes ``CHUNKTAPE_REDACT_PATTERNS`` adds (parsed once per value)."""
    global _env_loaded
    raw = os.environ.get(ENV_PATTERNS, "")
    if raw == _env_loaded[0]:
        return _env_loaded[1]
    try:
        spec = msgspec.json.decode(raw, type=dict[str, str]) if raw.strip() else {}
        shapes = {}
        for name, source in spec.items():
            compiled = re.compile(source)
            prefix = _literal_prefix(source) if not compiled.flags & re.IGNORECASE else ""
            shapes[name] = _Shape(compiled, (prefix,) if len(prefix) >= 2 else ())
    except (msgspec.DecodeError, re.error) as exc:
        raise LlmError(
            f"{ENV_PATTERNS} must be a JSON object of label to regex: {exc}",
            ErrorCode.INVALID_CONFIG,
            hint=f'e.g. {ENV_PATTERNS}=\'{{"acme key": "acme_[A-Za-z0-9]{{32}}"}}\'',
        ) from None
    _env_loaded = (raw, shapes)
    return shapes


# -- where literal secrets come from ---------------------------------------------------------------

_NAME_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
"""An environment variable whose name contains one of these, anywhere (``OPENAI_API_KEY_2``, ``DEEPSEEK_APIKEY``,
``DB_PASSWORD``, ``AWS_SECRET_ACCESS_KEY``), holds a credential."""
_NOT_SECRET = frozenset({"true", "false", "yes", "no", "on", "off", "none", "null", "enabled", "disabled"})
_NUMBER = re.compile(r"[+-]?(?:\d[\d_,.]*|0x[0-9a-fA-F]+)(?:[eE][+-]?\d+)?")


def is_credential_name(name: str) -> bool:
    """True for an environment variable named like a credential (see ``_NAME_WORDS``), in any case."""
    upper = name.upper()
    return any(word in upper for word in _NAME_WORDS)


def is_credential_value(value: str) -> bool:
    """The rule for values of credential-named variables: at least ``MIN_SECRET_LENGTH`` characters once
    stripped, and not a number or a switch word (``true``, ``off``, ``none``...): those occur by chance."""
    stripped = value.strip()
    return (
        len(stripped) >= MIN_SECRET_LENGTH
        and stripped.lower() not in _NOT_SECRET
        and _NUMBER.fullmatch(stripped) is None
    )


def env_secrets(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Values of environment variables that hold credentials, by name (``is_credential_name`` and ``_value``)."""
    environ = os.environ if environ is None else environ
    return {
        name: value
        for name, value in environ.items()
        if name != ENV_PATTERNS and is_credential_name(name) and is_credential_value(value)
    }


def is_credential_param(name: str) -> bool:
    """True for a URL query parameter named like a credential: ``key``, ``api_key``, ``api-key``, ``access_token``,
    ``token``, ``sig``, ``X-Amz-Signature``, ``client_secret``... (its name ends in one of ``_QUERY_WORDS``, or
    names a credential as an environment variable would)."""
    lowered = name.strip().lower()
    return lowered.endswith(_QUERY_WORDS) or is_credential_name(lowered)


def url_secrets(url: str) -> list[str]:
    """The credentials a URL carries: its userinfo (the password, or a user name standing alone as a token) and
    the values of its credential-named query parameters (``is_credential_param``), as sent and percent-decoded."""
    try:
        parts = urlsplit(url)
        password, username = parts.password, parts.username
    except ValueError:
        return []
    found: list[str] = []
    if password:
        found.append(password)
    elif username:
        found.append(username)
    for raw in parts.query.split("&"):
        name, _, value = raw.partition("=")
        if value and is_credential_param(name.replace("%5F", "_").replace("%2D", "-")):
            found.append(value)
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        if is_credential_param(name):
            found.append(value)
    return [secret for secret in dict.fromkeys(found) if is_credential_value(secret)]


def redact_url(url: str) -> str:
    """``url`` as it may be shown or stored: userinfo and the values of credential-named query parameters replaced
    by ``REDACTED`` (``http://admin:s3cr3t@host/?key=abc&v=1`` -> ``http://admin:[REDACTED]@host/?key=[REDACTED]&v=1``)."""
    try:
        parts = urlsplit(url)
        password, username, host = parts.password, parts.username, parts.hostname
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc
    if password is not None or username is not None:
        user = quote(username or "", safe="") if password is not None else REDACTED
        shown = f"{user}:{REDACTED}" if password is not None else user
        netloc = f"{shown}@{netloc.rpartition('@')[2]}" if host is not None else netloc
    query = "&".join(
        f"{name}={REDACTED}" if value and is_credential_param(name) else raw
        for raw in parts.query.split("&")
        for name, _, value in [raw.partition("=")]
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query if parts.query else "", parts.fragment))


# -- searching ---------------------------------------------------------------------------------------


class Found(NamedTuple):
    """One credential in a text: its label ("" for a literal secret), the credential, and the span to replace."""

    label: str
    found: str
    start: int
    end: int


def mask(secret: str) -> str:
    """How a finding names a credential: enough to recognise it, never enough to use it."""
    return f"{secret[:4]}…({len(secret)} chars)"


_UNICODE_ESCAPE = re.compile(r"\\+u([dD][89abAB][0-9a-fA-F]{2})\\+u([dD][c-fC-F][0-9a-fA-F]{2})|\\+u([0-9a-fA-F]{4})")
"""A JSON ``\\uXXXX`` escape, or a surrogate pair of two (one character); also escaped again (``\\\\u0073``: a
JSON snippet inside a JSON string, as tool arguments hold one)."""
_BASE64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_"
_MIN_RUN = 11
"""Base64 (standard or URL-safe) this long can hold an 8-character secret."""
_SCREEN_RUN = 24
"""The screen decodes runs this long for key shapes: a key needs 20 characters, which base64 makes 28."""
_URLSAFE = str.maketrans("-_", "+/")
_TO_URLSAFE = str.maketrans("+/", "-_")
_LINE_BREAKS = (b"\n", b"\r\n", b"\\n", b"\\r\\n")
"""What may end a line of wrapped base64: a newline, or its JSON escape (inside tool arguments)."""


def _decoded(
    text: str,
    pattern: re.Pattern[str],
    decode: Callable[[re.Match[str]], list[tuple[str, int]]],
    with_starts: bool = True,
) -> tuple[str, list[int]]:
    """``text`` with every match of ``pattern`` replaced by what ``decode`` makes of it (pieces of text, each with
    the offset in the match where the characters that spell it start), and where each decoded character starts in
    ``text`` (one entry more: the end), so a match in the decoded text maps back onto the characters that spelled it;
    without ``with_starts``, the text alone (the screen needs no more, and the list costs more than the decoding)."""
    parts: list[str] = []
    starts: list[int] = []
    position = 0
    for match in pattern.finditer(text):
        parts.append(text[position : match.start()])
        pieces = decode(match)
        parts.extend(piece for piece, _ in pieces)
        if with_starts:
            starts.extend(range(position, match.start()))
            for piece, offset in pieces:
                starts.extend([match.start() + offset] * len(piece))
        position = match.end()
    parts.append(text[position:])
    if with_starts:
        starts.extend(range(position, len(text) + 1))
    return "".join(parts), starts


def _unicode_escape(match: re.Match[str]) -> list[tuple[str, int]]:
    high, low, single = match.groups()
    if single is None:
        return [(chr(0x10000 + ((int(high, 16) - 0xD800) << 10) + int(low, 16) - 0xDC00), 0)]
    return [(chr(int(single, 16)), 0)]


def _unescaped(text: str, with_starts: bool = True) -> tuple[str, list[int]]:
    """``text`` with its ``\\uXXXX`` escapes decoded, wherever they are (a JSON snippet pasted after an odd
    ``"`` is not tokenised the way it was written), with where each decoded character starts in ``text``."""
    return _decoded(text, _UNICODE_ESCAPE, _unicode_escape, with_starts)


_PERCENT = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
"""A run of URL percent-escapes (``%2F``, ``%E5%AF%86``): decoded together, as UTF-8."""


def _percent_escape(match: re.Match[str]) -> list[tuple[str, int]]:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    data = bytes.fromhex(match.group().replace("%", ""))
    pieces, start = [], 0
    for number, byte in enumerate(data):
        piece = decoder.decode(bytes([byte]))
        if piece:
            pieces.append((piece, 3 * start))
            start = number + 1
    rest = decoder.decode(b"", final=True)
    if rest:
        pieces.append((rest, 3 * start))
    return pieces


_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
"""An HTML character reference (``&quot;``, ``&#47;``, ``&#x2F;``), as an HTML page or an escaped error body has it."""


def _html_entity(match: re.Match[str]) -> list[tuple[str, int]]:
    return [(html.unescape(match.group()), 0)]


_WINDOW = 256
"""How far around a percent-escape or a character reference a credential spelled with it is looked for: its
label, the gap to the value and the value itself (``AWS secret access key (labelled)``: 20 + 64 + 40)."""


def _windowed(
    pattern: re.Pattern[str], decode: Callable[[re.Match[str]], list[tuple[str, int]]]
) -> Callable[[str, bool], tuple[str, list[int]]]:
    """A view decoding ``pattern``'s matches in the parts of a text around them only (``_WINDOW`` on each side),
    the parts joined by NUL (which glues to nothing): text far from any escape was searched as it is already."""

    def view(text: str, with_starts: bool = True) -> tuple[str, list[int]]:
        windows: list[tuple[int, int]] = []
        for match in pattern.finditer(text):
            start, end = max(match.start() - _WINDOW, 0), min(match.end() + _WINDOW, len(text))
            if windows and start <= windows[-1][1]:
                windows[-1] = (windows[-1][0], end)
            else:
                windows.append((start, end))
        parts: list[str] = []
        starts: list[int] = []
        for start, end in windows:
            decoded, offsets = _decoded(text[start:end], pattern, decode, with_starts)
            parts.append(decoded + "\x00")
            starts.extend(start + offset for offset in offsets)  # the extra last entry stands for the NUL
        if not windows:
            return text, []  # nothing decodes: callers see the same length and skip the view
        if windows == [(0, len(text))]:
            return parts[0][:-1], starts
        return "".join(parts), [*starts, len(text)] if with_starts else []

    return view


_VIEWS: tuple[tuple[str, Callable[[str, bool], tuple[str, list[int]]]], ...] = (
    ("\\u", _unescaped),
    ("%", _windowed(_PERCENT, _percent_escape)),
    ("&", _windowed(_ENTITY, _html_entity)),
)
"""The encodings a credential is searched through, each with the character that must be in a text holding it:
JSON ``\\u`` escapes, URL percent-escapes, HTML character references."""


def _base64_texts(run: str) -> Iterator[str]:
    """``run`` decoded as base64 from each of its first four positions (it may be glued to a word before it)."""
    run = run.rstrip("=").translate(_URLSAFE)
    for offset in range(4):
        body = run[offset:]
        if len(body) < 8:
            return
        extra = len(body) % 4  # a cut-off last group still decodes its whole bytes
        body = body[:-1] if extra == 1 else body + "=" * (-extra % 4)
        try:
            decoded = binascii.a2b_base64(body)
        except binascii.Error:
            continue
        yield decoded.decode("utf-8", "replace")  # bytes that are not UTF-8 become U+FFFD, never glue


_RUN_MARKS = bytes(0x61 if chr(byte) in _BASE64_ALPHABET else 0x20 for byte in range(256))


def _runs(text: str, minimum: int) -> Iterator[tuple[int, int, str]]:
    """The base64 runs of ``text`` at least ``minimum`` long, with their span and content, at C speed.

    Base64 wrapped over lines (``base64``'s 76 columns, PEM's 64) is one run: a first line (which may be glued
    to a word before it), lines as long as the second, and a shorter last one, each after a single line break;
    its content is the lines joined, its span all of them.
    """
    data = text.encode("ascii", "replace")  # one byte per character: byte offsets are text offsets
    marks = data.translate(_RUN_MARKS)
    size = len(marks)
    wanted = b"a" * minimum
    start = marks.find(wanted)
    while start >= 0:
        end = marks.find(b" ", start)
        end = size if end < 0 else end
        pieces = [data[start:end]]
        width = 0  # of a full line: the second one's
        while True:
            after = next((end + len(brk) for brk in _LINE_BREAKS if data.startswith(brk, end)), size)
            if after >= size or marks[after] != 0x61:
                break
            stop = marks.find(b" ", after)
            stop = size if stop < 0 else stop
            pieces.append(data[after:stop])
            line, end = stop - after, stop
            width = width or line
            if line != width or width % 4:
                break  # the last line, or lines that are not a wrap
        yield start, end, b"".join(pieces).decode("ascii")
        start = marks.find(wanted, end)


def _trie(needles: Iterable[str]) -> str:
    """A regex matching any of ``needles``, their common prefixes factored out (``e(?:yJ|arer|cret_...)``), so
    the engine tests each character of the text against one branch per first letter, not one per needle."""
    branches: dict[str, list[str]] = {}
    for needle in needles:
        branches.setdefault(needle[:1], []).append(needle[1:])
    parts = []
    for first, rests in sorted(branches.items()):
        if "" in rests:  # a needle ends here: the rest are longer and need not be looked for
            parts.append(re.escape(first))
            continue
        rest = _trie(rests)
        parts.append(re.escape(first) + (rest if len(rests) == 1 else f"(?:{rest})"))
    return "|".join(parts)


def _base64_cores(secret: str) -> list[str]:
    """The base64 characters that ``secret`` alone determines, at each of the three byte alignments it can have
    in encoded data: any base64 of a text holding ``secret`` holds one of them (the groups it only partly fills
    are left out), whatever comes before or after it and wherever the encoding starts. No cores for a secret that
    is not UTF-8 text (no decoded base64 spells it)."""
    try:
        data = secret.encode("utf-8")
    except UnicodeEncodeError:  # an environment value with a byte that is not UTF-8: no base64 spells it
        return []
    cores = []
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data).decode("ascii")
        first, end = -(-shift // 3), (shift + len(data)) // 3  # the groups of three bytes all of secret
        cores.append(encoded[4 * first : 4 * end])
    return cores


def _one_alphabet(run: str) -> bool:
    """A run of base64 in one alphabet, standard or URL-safe (not both, which decoding reads as one)."""
    return not (("-" in run or "_" in run) and ("+" in run or "/" in run))


class Scanner:
    """A credential search set up once: the literal secrets given, and (``patterns``) the key shapes in force.

    Get one with ``scanner(secrets, patterns=...)``; it is cached, so building one per call is cheap.
    """

    __slots__ = ("_always", "_encoded", "_run", "_screen", "_shapes", "literals")

    def __init__(self, secrets: Iterable[str] = (), *, patterns: bool = True) -> None:
        self.literals = usable(secrets)
        shapes = {**_shapes, **_env_shapes()} if patterns else {}
        self._shapes = tuple((name, shape) for name, shape in shapes.items())
        self._always = any(not shape.needles for shape in shapes.values())
        needles = dict.fromkeys([*self.literals, *(needle for shape in shapes.values() for needle in shape.needles)])
        # one alternation: the regex engine skips, in C, every position whose character starts no needle
        self._screen = re.compile(_trie(needles) or "(?!)")
        # base64 of a literal at any alignment keeps 4/3 of its length, less up to 2 characters at each end
        self._run = min([_SCREEN_RUN, *(len(secret) * 4 // 3 - 4 for secret in self.literals)])
        # Literals alone (no key shapes to look for in decoded data): their base64 is found without decoding, a
        # search for the characters each determines (an image's megabytes of base64 are then not decoded 4 times).
        cores = [] if shapes else [core for secret in self.literals for core in _base64_cores(secret)]
        both = dict.fromkeys([*cores, *(core.translate(_TO_URLSAFE) for core in cores)])  # standard, URL-safe
        self._encoded = re.compile(_trie(both)) if both else None

    def may_hold(self, text: str) -> bool:
        """A cheap screen at C speed: can ``text`` hold a credential at all, plain, escaped or in base64?"""
        screen = self._screen.search
        if self._always or screen(text):
            return True
        for trigger, view in _VIEWS:
            if trigger in text:
                decoded = view(text, False)[0]
                if len(decoded) < len(text) and screen(decoded):
                    return True
        runs = (run for _, _, run in _runs(text, self._run))
        if self._encoded is not None:
            return any(self._encoded.search(run if _one_alphabet(run) else run.translate(_URLSAFE)) for run in runs)
        return any(screen(decoded) for run in runs for decoded in _base64_texts(run))

    def matches(self, text: str, *, decode: bool = True) -> Iterator[Found]:
        """Every credential in ``text``.

        With ``decode``, ``text`` is also searched with its ``\\u`` escapes decoded (a hit spans the escapes that
        spell it) and each base64 run decoded (a hit spans the whole run, over all its lines if it is wrapped).
        """
        # The screen holds every literal and every shape's needles: text it finds nothing in has no plain match.
        if self._always or self._screen.search(text) is not None:
            yield from self._plain_matches(text)
        if not decode:
            return
        for trigger, view in _VIEWS:
            if trigger not in text:
                continue
            decoded = view(text, False)[0]
            if len(decoded) < len(text):
                found_here = list(self.matches(decoded, decode=False))
                if found_here:
                    starts = view(text, True)[1]  # built only for a text that holds a credential
                    for label, found, start, end in found_here:
                        yield Found(label, found, starts[start], starts[end])
        for start, end, run in _runs(text, _MIN_RUN):
            for decoded in _base64_texts(run):
                for label, found, _, _ in self.matches(decoded, decode=False):
                    yield Found(f"base64 of {label}" if label else "", found, start, end)

    def _plain_matches(self, text: str) -> Iterator[Found]:
        """The literal secrets and key shapes in ``text`` as it is (nothing decoded)."""
        for secret in self.literals:
            start = text.find(secret)
            while start >= 0:
                yield Found("", secret, start, start + len(secret))
                start = text.find(secret, start + 1)
        for label, shape in self._shapes:
            if shape.needles and not any(needle in text for needle in shape.needles):
                continue
            regex = shape.search or shape.pattern
            named = "secret" in regex.groupindex
            position = 0
            while (match := regex.search(text, position)) is not None:
                position = max(match.end(), match.start() + 1)
                if (
                    shape.search is not None
                    and not match.group().startswith(shape.anywhere)
                    and not _clean_start(text, match.start())
                ):
                    position = match.start() + 1  # a later, clean start may overlap this one
                    continue
                start, end = match.span("secret") if named else match.span()
                if start == end or (shape.check is not None and not shape.check(match.group())):
                    continue
                yield Found(label, text[start:end], start, end)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The spans of ``text`` to replace so that the result holds no credential at all.

        Replacing can create a match (``789sk-...`` -> ``[REDACTED]sk-...``) or reveal one in a JSON string
        whose raw form hid it, so the redacted text is searched again and every new match, mapped back onto
        ``text``, widens the spans, until nothing new turns up. Each round covers more of ``text``, so it ends.
        """
        spans = _merge((start, end) for _, _, start, end in self.matches(text, decode=False))
        while True:
            redacted = _replace(text, spans) if spans else text
            new = [
                (_original(start, spans, end=False), _original(end, spans, end=True))
                for _, _, start, end in self.matches(redacted)
            ]
            new = [(a, b) for a, b in new if not any(start <= a and b <= end for start, end in spans)]
            if not new:
                return spans
            spans = _merge([*spans, *new])

    def redact(self, text: str) -> str:
        """``text`` with every credential replaced by ``REDACTED``."""
        if not self.may_hold(text):
            return text
        spans = self.spans(text)
        return _replace(text, spans) if spans else text

    def redact_pieces(self, pieces: Sequence[str]) -> list[str] | None:
        """``pieces`` (deltas of one block) redacted on their concatenation, so a credential split over deltas
        goes too; the marker goes where a credential starts. None when there is nothing to redact."""
        whole = "".join(pieces)
        spans = self.spans(whole)
        if not spans:
            return None
        result, low = [], 0
        for piece in pieces:
            high = low + len(piece)
            parts, position = [], low
            for start, end in spans:
                if end <= low or start >= high:
                    continue
                if start >= low:
                    parts.append(whole[position:start])
                    parts.append(REDACTED)
                position = max(position, min(end, high))
            parts.append(whole[position:high])
            result.append("".join(parts))
            low = high
        return result


def usable(secrets: Iterable[str]) -> tuple[str, ...]:
    """Long enough to be a credential, and not part of the marker itself (redacting would never end); longest first.

    A value with spaces or a line end around it (a ``.env`` saved with CRLF) also counts stripped: that is what
    a program sends.
    """
    candidates = {form for secret in secrets for form in (secret, secret.strip())}
    found = {secret for secret in candidates if len(secret) >= MIN_SECRET_LENGTH and secret not in REDACTED}
    return tuple(sorted(found, key=len, reverse=True))


@functools.lru_cache(maxsize=64)
def _cached(literals: tuple[str, ...], patterns: bool, generation: int, env: str) -> Scanner:
    return Scanner(literals, patterns=patterns)


def scanner(secrets: Iterable[str] = (), *, patterns: bool = True) -> Scanner:
    """The (cached) ``Scanner`` for ``secrets`` and, with ``patterns``, every key shape in force."""
    return _cached(usable(secrets), patterns, _generation, os.environ.get(ENV_PATTERNS, ""))


def _merge(found: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(found):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _original(position: int, spans: Sequence[tuple[int, int]], *, end: bool) -> int:
    """Where ``position`` in ``_replace(text, spans)`` is in ``text``; inside a marker: the whole span it replaced."""
    shift = 0  # original position minus redacted position, in the plain text before the current marker
    for start, stop in spans:
        marker_start = start - shift
        marker_end = marker_start + len(REDACTED)
        if position < marker_start or (end and position == marker_start):
            return position + shift
        if position < marker_end or (end and position == marker_end):
            return stop if end else start
        shift = stop - marker_end
    return position + shift


def _replace(text: str, spans: Sequence[tuple[int, int]]) -> str:
    parts, position = [], 0
    for start, end in spans:
        parts.append(text[position:start])
        parts.append(REDACTED)
        position = end
    parts.append(text[position:])
    return "".join(parts)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """The one redaction of a message shown to a person (errors, mismatch diffs, server error bodies, CLI output).

    Replaces ``secrets``, the credentials in the environment (``env_secrets``) and every key-shaped string,
    also those a cassette was allowed to keep: display never shows a credential unless asked to.
    """
    return scanner([*secrets, *env_secrets().values()]).redact(text)
