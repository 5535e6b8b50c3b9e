"""What a credential looks like, and the one redaction of credentials from anything stored or shown.

The public face of ``chunktape._secrets`` (which holds the patterns and the scanner): these names and no others.
"""

from chunktape._secrets import (
    ENV_PATTERNS,
    KEY_PATTERNS,
    MIN_SECRET_LENGTH,
    REDACTED,
    Found,
    Scanner,
    env_secrets,
    is_credential_name,
    is_credential_value,
    mask,
    redact_text,
    register_pattern,
    scanner,
    unregister_pattern,
    usable,
)

__all__ = [
    "ENV_PATTERNS",
    "Found",
    "KEY_PATTERNS",
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "Scanner",
    "env_secrets",
    "is_credential_name",
    "is_credential_value",
    "mask",
    "redact_text",
    "register_pattern",
    "scanner",
    "unregister_pattern",
    "usable",
]
