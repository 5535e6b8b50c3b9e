"""Faults, end to end: the specs (``specs``), their choice per call (``plan``) and the one set of stream
transforms (``transforms``) that chunk streams (``chunks``) and HTTP bodies (``chunktape.faults._sse``) share.

The public face is the specs: every fault Struct, ``STANDARD_FAULTS`` and the parsers.
"""

from chunktape.faults._specs import (
    CORRUPT_KINDS,
    CORRUPT_RULES,
    STANDARD_FAULTS,
    Always,
    Chaos,
    Corrupt,
    CorruptKind,
    Disconnect,
    FailFirst,
    Fault,
    HttpError,
    Latency,
    Stall,
    StreamError,
    StreamFault,
    Targeted,
    Truncate,
    fault_id,
    is_transient,
    parse_fault,
    parse_faults,
)

__all__ = [
    "Always",
    "CORRUPT_KINDS",
    "CORRUPT_RULES",
    "Chaos",
    "Corrupt",
    "CorruptKind",
    "Disconnect",
    "FailFirst",
    "Fault",
    "HttpError",
    "Latency",
    "STANDARD_FAULTS",
    "Stall",
    "StreamError",
    "StreamFault",
    "Targeted",
    "Truncate",
    "fault_id",
    "is_transient",
    "parse_fault",
    "parse_faults",
]
