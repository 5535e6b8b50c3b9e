"""Fault specs: encoding, ids, the standard catalogue, and validation errors that name the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

import chunktape.faults as faults_module
from chunktape._errors import ErrorCode, LlmError
from chunktape._validation import RULES
from chunktape.faults import (
    CORRUPT_KINDS,
    CORRUPT_RULES,
    STANDARD_FAULTS,
    Chaos,
    Corrupt,
    Disconnect,
    FailFirst,
    Fault,
    HttpError,
    Latency,
    Stall,
    Targeted,
    Truncate,
    fault_id,
    parse_fault,
    parse_faults,
)

EXAMPLES: list[Fault] = [
    *STANDARD_FAULTS.values(),
    Latency(first_chunk_s=0.5, between_s=0.02, jitter_s=0.01, seed=7),
    Disconnect(after_s=1.5),
    FailFirst(n=2, fault=HttpError(status=503)),
    Chaos(rate=0.25, faults=[HttpError(status=500), Disconnect(after_chunks=2)], seed=42),
    Targeted(fault=FailFirst(n=1, fault=Truncate(after_chunks=2)), calls=[1, 3], model="m", match="files?"),
]


def test_public_names_are_sorted_and_exported() -> None:
    assert faults_module.__all__ == sorted(faults_module.__all__)
    for name in faults_module.__all__:
        assert hasattr(faults_module, name)


@pytest.mark.parametrize("fault", EXAMPLES, ids=fault_id)
@pytest.mark.parametrize("codec", [msgspec.json, msgspec.msgpack], ids=["json", "msgpack"])
def test_every_fault_round_trips_through_msgspec(fault: Fault, codec: Any) -> None:
    encoded = codec.encode(fault)
    assert codec.decode(encoded, type=Fault) == fault


def test_faults_are_tagged_on_type_with_snake_case_fields() -> None:
    encoded = msgspec.json.decode(msgspec.json.encode(HttpError(status=429, retry_after=2.0)))
    assert encoded == {"type": "http-error", "status": 429, "retry_after": 2.0}
    assert msgspec.json.decode(msgspec.json.encode(FailFirst(n=2, fault=Stall(after_chunks=1, seconds=3)))) == {
        "type": "fail-first",
        "n": 2,
        "fault": {"type": "stall", "after_chunks": 1, "seconds": 3},
    }


def test_standard_catalogue_ids_are_stable_and_ordered() -> None:
    assert list(STANDARD_FAULTS) == [
        "http-429",
        "http-500",
        "http-503",
        "http-401",
        "http-400",
        "disconnect-before-first-chunk",
        "disconnect-after-first-chunk",
        "disconnect-mid-text",
        "disconnect-mid-tool-call",
        "stall-30s",
        "truncate",
        *(f"corrupt-{kind}" for kind in CORRUPT_KINDS),
        "http-529",
        "error-mid-stream",
    ]
    for name, fault in STANDARD_FAULTS.items():
        assert fault.fault_id == name == fault_id(fault)


def test_standard_catalogue_content() -> None:
    assert STANDARD_FAULTS["http-429"] == HttpError(
        id="http-429", status=429, retry_after=2.0, message="rate limit exceeded"
    )
    assert STANDARD_FAULTS["disconnect-mid-tool-call"] == Disconnect(id="disconnect-mid-tool-call", inside="tool-call")
    assert STANDARD_FAULTS["stall-30s"] == Stall(id="stall-30s", after_chunks=1, seconds=30.0)
    with pytest.raises(TypeError):
        STANDARD_FAULTS["mine"] = HttpError(status=500)  # type: ignore[index]


def test_every_corrupt_kind_names_a_validator_rule() -> None:
    assert set(CORRUPT_RULES) == set(CORRUPT_KINDS)
    assert set(CORRUPT_RULES.values()) <= set(RULES)


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (HttpError(status=503), "http-503"),
        (Disconnect(after_chunks=0), "disconnect-before-first-chunk"),
        (Disconnect(after_chunks=3), "disconnect-after-3-chunks"),
        (Disconnect(after_s=1.5), "disconnect-after-1.5s"),
        (Disconnect(inside="text"), "disconnect-mid-text"),
        (Stall(after_chunks=2, seconds=30), "stall-30s-after-2-chunks"),
        (Latency(first_chunk_s=0.5, between_s=0.02), "latency-0.5s-0.02s"),
        (Truncate(after_chunks=4), "truncate-after-4-chunks"),
        (Corrupt(kind="bad-index", seed=3), "corrupt-bad-index"),
        (FailFirst(n=2, fault=HttpError(status=503)), "fail-first-2-http-503"),
        (Chaos(rate=0.5, faults=[HttpError(status=500)]), "chaos-0.5"),
        (Targeted(fault=HttpError(status=500), calls=[2]), "targeted-http-500"),
        (HttpError(status=500, id="my-outage"), "my-outage"),
    ],
)
def test_derived_fault_ids(fault: Fault, expected: str) -> None:
    assert fault.fault_id == expected


INVALID: list[tuple[Callable[[], object], str]] = [
    (lambda: HttpError(status=99), "HttpError.status"),
    (lambda: HttpError(status=600), "HttpError.status"),
    (lambda: HttpError(status=429, retry_after=-1), "HttpError.retry_after"),
    (lambda: Disconnect(), "exactly one of after_chunks, after_s, inside"),
    (lambda: Disconnect(after_chunks=1, after_s=2.0), "exactly one of after_chunks, after_s, inside"),
    (lambda: Disconnect(after_chunks=-1), "Disconnect.after_chunks"),
    (lambda: Disconnect(after_s=float("nan")), "Disconnect.after_s"),
    (lambda: Disconnect(inside="image"), "Disconnect.inside"),  # type: ignore[arg-type]
    (lambda: Stall(after_chunks=-2, seconds=1), "Stall.after_chunks"),
    (lambda: Stall(after_chunks=1, seconds=-1), "Stall.seconds"),
    (lambda: Latency(between_s=-0.1), "Latency.between_s"),
    (lambda: Truncate(after_chunks=-1), "Truncate.after_chunks"),
    (lambda: Corrupt(kind="garbled"), "Corrupt.kind"),  # type: ignore[arg-type]
    (lambda: FailFirst(n=-1, fault=HttpError(status=500)), "FailFirst.n"),
    (lambda: Chaos(rate=1.5, faults=[HttpError(status=500)]), "Chaos.rate"),
    (lambda: Chaos(rate=-0.1, faults=[HttpError(status=500)]), "Chaos.rate"),
    (lambda: Chaos(rate=0.5, faults=[]), "Chaos.faults"),
    (lambda: Targeted(fault=HttpError(status=500)), "Targeted.calls"),
    (lambda: Targeted(fault=HttpError(status=500), calls=[0]), "Targeted.calls[0]"),
    (lambda: Targeted(fault=HttpError(status=500), match="(unclosed"), "Targeted.match"),
]


@pytest.mark.parametrize(("build", "field"), INVALID)
def test_invalid_specs_raise_invalid_config_naming_the_field(build: Callable[[], object], field: str) -> None:
    with pytest.raises(LlmError) as caught:
        build()
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    assert field in str(caught.value)
    assert str(caught.value).startswith("[INVALID_CONFIG]")


def test_corrupt_kind_error_lists_the_valid_kinds() -> None:
    with pytest.raises(LlmError, match="valid kinds: unpaired-block, bad-index"):
        Corrupt(kind="nope")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"type": "explode"}, "`$.type`"),
        ({"type": "http-error", "status": 99}, "`$.status`"),
        ({"type": "http-error", "status": 700}, "`$.status`"),
        ({"type": "stall", "after_chunks": -1, "seconds": 1}, "`$.after_chunks`"),
        ({"type": "chaos", "rate": 2, "faults": [{"type": "http-error", "status": 500}]}, "`$.rate`"),
        ({"type": "corrupt", "kind": "garbled"}, "`$.kind`"),
        ({"type": "truncate"}, "`after_chunks`"),
        ({"type": "truncate", "after_chunks": 1, "extra": True}, "`extra`"),
        ({"type": "fail-first", "n": 1, "fault": {"type": "http-error", "status": 9}}, "`$.fault.status`"),
        ({"type": "disconnect", "after_chunks": 1, "inside": "text"}, "exactly one of"),
    ],
)
def test_parse_fault_errors_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(LlmError) as caught:
        parse_fault(data)
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    assert field in str(caught.value)


def test_unknown_fault_type_lists_the_valid_types() -> None:
    with pytest.raises(LlmError, match="valid fault types: always, chaos, corrupt, disconnect, fail-first, http-error"):
        parse_fault({"type": "explode"})


def test_parse_fault_accepts_structs_standard_ids_and_mappings() -> None:
    fault = HttpError(status=500)
    assert parse_fault(fault) is fault
    assert parse_fault("http-429") == STANDARD_FAULTS["http-429"]
    assert parse_fault({"type": "disconnect", "after_chunks": 3}) == Disconnect(after_chunks=3)
    with pytest.raises(LlmError, match="unknown standard fault 'http-999'; valid ids: http-429"):
        parse_fault("http-999")
    with pytest.raises(LlmError, match="expected a fault"):
        parse_fault(42)  # type: ignore[arg-type]


def test_parse_faults_names_the_position() -> None:
    with pytest.raises(LlmError, match=r"faults\[1\]"):
        parse_faults(["http-429", {"type": "stall", "after_chunks": -1, "seconds": 1}])
    assert parse_faults(["truncate"]) == [STANDARD_FAULTS["truncate"]]


def test_faults_are_frozen_and_hashable() -> None:
    fault = Disconnect(after_chunks=3)
    with pytest.raises(AttributeError):
        fault.after_chunks = 4  # type: ignore[misc]
    assert {fault, Disconnect(after_chunks=3)} == {fault}


def test_faults_read_like_the_design_positionally() -> None:
    assert FailFirst(2, HttpError(503)) == FailFirst(n=2, fault=HttpError(status=503))
    assert Stall(2, 30) == Stall(after_chunks=2, seconds=30)
    assert Corrupt("bad-index", 7) == Corrupt(kind="bad-index", seed=7)
    assert Chaos(0.5, [HttpError(500)], 3) == Chaos(rate=0.5, faults=[HttpError(status=500)], seed=3)
    assert Targeted(HttpError(500), [1, 3]) == Targeted(fault=HttpError(status=500), calls=[1, 3])
    with pytest.raises(TypeError):
        HttpError(500, None, None, "my-id")  # type: ignore[call-arg]


def test_a_single_fault_is_a_list_of_one_never_iterated() -> None:
    assert parse_faults("http-429") == [STANDARD_FAULTS["http-429"]]
    assert parse_faults({"type": "http-error", "status": 503}) == [HttpError(503)]
    assert parse_faults(HttpError(500)) == [HttpError(500)]
    with pytest.raises(LlmError, match="faults must be a list") as caught:
        parse_faults(123)  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.INVALID_CONFIG
