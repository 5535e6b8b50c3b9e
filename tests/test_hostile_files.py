"""Files a user names, built to hurt: YAML aliases that expand to gigabytes, decompression bombs, bytes that are not
UTF-8, /dev/zero, FIFOs and sparse giants, absurd recorded values, and outputs that hold someone's cassette.

Each is refused in one line, with its code and exit status, after bounded work: the YAML is measured, not
expanded; a body is decoded up to its cap and no further; a file's kind and size are checked before a byte is
read. The one process that decodes a bomb runs under an address-space limit it could not stay in otherwise."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import httpx2
import msgspec
import pytest
import yaml
from typer.testing import CliRunner

from chunktape import (
    Cassette,
    Completed,
    ErrorCode,
    Event,
    GenerateOptions,
    Interaction,
    LlmError,
    Message,
    Raised,
    RecordedRequest,
    _limits,
    load_cassette,
    save_cassette,
)
from chunktape._report.analysis import check_cassette
from chunktape.cli import app
from chunktape.http import RecordingTransport
from chunktape.http._server.scenarios import load_scenarios, parse_scenarios
from chunktape.http._vcr import read_vcr
from fake_provider import FakeProvider, FakeResponse
from helpers import options, text_stream

CHAT = "https://api.example.test/v1/chat/completions"
HELLO = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
STREAM = 'data: {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'


def _exchange(response_body: Any, *, uri: str = CHAT, headers: dict[str, list[str]] | None = None) -> dict[str, Any]:
    return {
        "request": {"body": msgspec.json.encode(HELLO).decode(), "headers": {}, "method": "POST", "uri": uri},
        "response": {
            "body": {"string": response_body},
            "headers": {"content-type": ["text/event-stream"], **(headers or {})},
            "status": {"code": 200, "message": "OK"},
        },
    }


def _write(path: Path, *interactions: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"interactions": list(interactions), "version": 1}), encoding="utf-8")
    return path


def _zeros(size: int, wbits: int) -> bytes:
    """``size`` zero bytes compressed (gzip: wbits 31; zlib deflate: 15), about a thousandth of that, in no time:
    one mebibyte compressed after a full flush is a self-contained block, repeated. (The trailer's checksum is of
    two mebibytes: a decoder finds out only at the end, which it must never reach.)"""
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    block = bytes(1 << 20)
    head = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    middle = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    return head + middle * ((size >> 20) - 1) + packer.flush()


def _one_line(result: Any) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return str(lines[0])


# -- YAML that expands ------------------------------------------------------------------------------------


def _laughs(levels: int = 12) -> str:
    """The billion laughs in a request's parsed_body: each level ten aliases of the one below (10**12 leaves)."""
    lines = [
        "interactions:",
        "- request:",
        "    method: POST",
        f"    uri: {CHAT}",
        "    headers: {}",
        "    parsed_body:",
    ]
    lines.append('      l0: &l0 ["lol"]')
    for level in range(1, levels + 1):
        lines.append(f"      l{level}: &l{level} [{', '.join(f'*l{level - 1}' for _ in range(10))}]")
    lines += ["  response:", "    status: {code: 200, message: OK}", "    headers: {}", "    body: {string: ''}"]
    return "\n".join(lines) + "\nversion: 1\n"


def test_a_billion_laughs_is_refused_unexpanded_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(_laughs(), encoding="utf-8")
    assert path.stat().st_size < 2000
    with pytest.raises(LlmError) as caught:
        read_vcr(path)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    assert "expands to more than" in caught.value.message
    assert "billion-laughs" in caught.value.message
    result = CliRunner().invoke(app, ["import-vcr", str(path), "-o", str(tmp_path / "out.msgpack")])
    assert result.exit_code == 3
    assert "CASSETTE_CORRUPT" in _one_line(result)
    assert not (tmp_path / "out.msgpack").exists()


def test_a_recursive_alias_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text(_laughs(1).replace('l0: &l0 ["lol"]', "l0: &l0 [*l0]"), encoding="utf-8")
    with pytest.raises(LlmError) as caught:
        read_vcr(path)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT


def test_aliases_a_real_cassette_holds_still_load(tmp_path: Path) -> None:
    """PyYAML itself writes anchors for a repeated object: a modest use is no bomb."""
    shared = {"content-type": ["text/event-stream"]}
    first, second = _exchange(STREAM), _exchange(STREAM)
    first["response"]["headers"] = second["response"]["headers"] = shared
    path = tmp_path / "anchors.yaml"
    path.write_text(yaml.dump({"interactions": [first, second], "version": 1}), encoding="utf-8")
    assert "&id" in path.read_text()
    assert len(read_vcr(path).cassette.interactions) == 2


# -- decompression bombs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("encoding", "wbits"), [("gzip", 31), ("deflate", 15)])
def test_a_compressed_body_decodes_up_to_its_cap_and_no_further(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoding: str, wbits: int
) -> None:
    monkeypatch.setattr(_limits, "MAX_DECODED_BYTES", 1 << 20)
    bomb = _zeros(8 << 20, wbits)  # 8 MiB of zeros behind some 8 KB
    path = _write(tmp_path / "bomb.yaml", _exchange(bomb, headers={"content-encoding": [encoding]}))
    with pytest.raises(LlmError) as caught:
        read_vcr(path)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    assert f"decodes to more than {1 << 20:,} bytes" in caught.value.message
    assert "\x00" not in caught.value.message
    decoder = _limits.BodyDecoder(encoding)
    with pytest.raises(_limits.BodyDecodeError):
        for _ in decoder.feed(bomb):
            pass
    assert decoder.decoded <= (1 << 20) + _limits.PIECE_BYTES  # never more than the cap and one piece produced


def test_a_truncated_gzip_body_is_an_error_not_an_empty_answer(tmp_path: Path) -> None:
    cut = zlib.compressobj(9, zlib.DEFLATED, 31)
    whole = cut.compress(STREAM.encode() * 50) + cut.flush()
    path = _write(tmp_path / "cut.yaml", _exchange(whole[: len(whole) // 2], headers={"content-encoding": ["gzip"]}))
    with pytest.raises(LlmError, match="truncated") as caught:
        read_vcr(path)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT


def _import_limited(path: Path, out: Path, *, uncapped: bool = False) -> subprocess.CompletedProcess[str]:
    """``chunktape import-vcr path -o out`` in a process whose address space may grow by 512 MiB past its start."""
    code = (
        "import resource, sys, runpy;"
        "used = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize();"
        "limit = used + 512 * 2**20;"
        "resource.setrlimit(resource.RLIMIT_AS, (limit, limit));"
        + ("import chunktape._limits as limits; limits.MAX_DECODED_BYTES = 2**40;" if uncapped else "")
        + "sys.argv = ['chunktape', 'import-vcr', sys.argv[1], '-o', sys.argv[2]];"
        "runpy.run_module('chunktape', run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(path), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )


def test_import_vcr_of_a_gigabyte_bomb_stays_within_an_address_space_limit(tmp_path: Path) -> None:
    """1 GiB of zeros behind 1 MB of gzip: refused in one line by a process that may grow by 512 MiB (chunktape
    and vcrpy take some 60 of it), which decoding the body whole would not fit in."""
    bomb = _zeros(1 << 30, 31)
    assert len(bomb) < 1_100_000
    path = _write(tmp_path / "bomb.yaml", _exchange(bomb, headers={"content-encoding": ["gzip"]}))
    done = _import_limited(path, tmp_path / "out.msgpack")
    assert done.returncode == 3, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "CASSETTE_CORRUPT" in line
    assert "decodes to more than 67,108,864 bytes" in line
    assert not (tmp_path / "out.msgpack").exists()


# -- undecodable text ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda good: b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
        lambda good: good.replace(b'"content":"hi"', b'"content":"\xff\xfe"'),
    ],
    ids=["binary-junk", "bad-bytes-in-a-valid-cassette"],
)
def test_a_file_that_is_not_utf8_says_so_and_where(tmp_path: Path, make: Any) -> None:
    good = _write(tmp_path / "good.yaml", _exchange(STREAM)).read_bytes()
    assert b'"content":"hi"' in good
    path = tmp_path / "bad.yaml"
    path.write_bytes(make(good))
    result = CliRunner().invoke(app, ["import-vcr", str(path), "-o", str(tmp_path / "out.msgpack")])
    assert result.exit_code == 3
    line = _one_line(result)
    assert "CASSETTE_CORRUPT" in line
    assert "not UTF-8 YAML" in line
    assert "at line" in line
    assert "offset" in line


# -- one rule for every path a user names ------------------------------------------------------------------------


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.msgpack"
    os.mkfifo(path)
    return path


def _sparse(tmp_path: Path) -> Path:
    path = tmp_path / "huge.msgpack"
    with path.open("wb") as file:
        file.truncate(_limits.MAX_FILE_BYTES + 1)  # a hole: no disk used, no byte read
    return path


@pytest.mark.parametrize("command", ["show", "check", "play"])
@pytest.mark.parametrize("where", ["/dev/zero", "fifo", "sparse"])
def test_show_check_and_play_refuse_what_is_no_regular_file_or_too_large(
    tmp_path: Path, command: str, where: str
) -> None:
    path = {
        "/dev/zero": lambda: Path("/dev/zero"),
        "fifo": lambda: _fifo(tmp_path),
        "sparse": lambda: _sparse(tmp_path),
    }
    target = path[where]()
    result = CliRunner().invoke(app, [command, str(target), *(["--instant"] if command == "play" else [])])
    assert result.exit_code in (1, 3)
    shown = result.stdout + result.stderr
    assert ("not a regular file" in shown) or ("byte limit" in shown), shown


def test_a_scenario_naming_dev_zero_is_refused_at_once(tmp_path: Path) -> None:
    scenarios = tmp_path / "scenarios.toml"
    scenarios.write_text('[[scenarios]]\nname = "zero"\ncassette = "/dev/zero"\n', encoding="utf-8")
    from chunktape.http import ReplayServer

    with pytest.raises(LlmError) as caught:
        ReplayServer(scenarios=scenarios)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    assert "a character device, not a regular file" in caught.value.message
    result = CliRunner().invoke(app, ["serve", "--scenarios", str(scenarios), "--port", "0"])
    assert result.exit_code == 3
    assert "not a regular file" in _one_line(result)


def test_a_scenario_file_itself_goes_by_the_same_rule(tmp_path: Path) -> None:
    fifo = tmp_path / "scenarios.toml"
    os.mkfifo(fifo)
    with pytest.raises(LlmError, match="a FIFO, not a regular file") as caught:
        load_scenarios(fifo)
    assert caught.value.code is ErrorCode.INVALID_CONFIG


def test_the_file_limit_can_be_set_and_a_file_past_it_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.msgpack"
    save_cassette(Cassette(interactions=[]), path)
    monkeypatch.setenv(_limits.ENV_MAX_FILE_BYTES, str(path.stat().st_size - 1))
    with pytest.raises(LlmError, match=r"over the .*-byte limit") as caught:
        load_cassette(path)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    monkeypatch.setenv(_limits.ENV_MAX_FILE_BYTES, str(path.stat().st_size))
    assert load_cassette(path).interactions == []


# -- writers never replace a user's cassette silently ----------------------------------------------------


def _three(path: Path) -> Path:
    interactions = [
        Interaction(
            request=RecordedRequest.from_options(options(f"q{n}")),
            events=[Event(t_ns=n, chunk=c) for n, c in enumerate(text_stream("a"))],
            outcome=Completed(t_ns=9),
        )
        for n in range(3)
    ]
    save_cassette(Cassette(interactions=interactions), path)
    return path


@pytest.mark.parametrize("command", ["import-vcr", "convert"])
def test_import_vcr_and_convert_refuse_an_existing_output_and_offer_append_or_force(
    tmp_path: Path, command: str
) -> None:
    existing = _three(tmp_path / "existing.msgpack")
    before = existing.read_bytes()
    source = _write(tmp_path / "in.yaml", _exchange(STREAM)) if command == "import-vcr" else _three(tmp_path / "a.json")
    args = [command, str(source), *(["-o"] if command == "import-vcr" else []), str(existing)]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 3
    assert "exists; pass --append to add to it or --force to replace it" in _one_line(refused)
    assert existing.read_bytes() == before
    appended = CliRunner().invoke(app, [*args, "--append"])
    assert appended.exit_code == 0, appended.output
    added = 1 if command == "import-vcr" else 3
    assert len(load_cassette(existing).interactions) == 3 + added
    forced = CliRunner().invoke(app, [*args, "--force"])
    assert forced.exit_code == 0, forced.output
    assert len(load_cassette(existing).interactions) == added


# -- values no stream records ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "retry_after", "said"),
    [
        ("PROVIDER_HTTP_ERROR", math.nan, "retry_after nan"),
        ("PROVIDER_HTTP_ERROR", 1e308, "retry_after 1e+308"),
        ("PROVIDER_HTTP_ERROR", -1.0, "retry_after -1.0"),
        ("NOT_A_CODE", None, "'NOT_A_CODE' is not one chunktape raises"),
    ],
    ids=["nan", "1e308", "negative", "unknown-code"],
)
def test_check_flags_a_retry_after_no_one_can_wait_and_an_unknown_code(
    tmp_path: Path, code: str, retry_after: float | None, said: str
) -> None:
    raised = Raised(t_ns=5, code=code, message="slow down", status=429, retry_after=retry_after)
    interaction = Interaction(request=RecordedRequest.from_options(options()), events=[], outcome=raised)
    path = tmp_path / "odd.msgpack"
    save_cassette(Cassette(interactions=[interaction]), path)
    (problem,) = check_cassette(path)
    assert problem.rule == "outcome"
    assert said in problem.detail
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 1


def test_a_retry_after_of_a_day_or_less_passes(tmp_path: Path) -> None:
    raised = Raised(t_ns=5, code="PROVIDER_HTTP_ERROR", message="quota", status=429, retry_after=86_400.0)
    path = tmp_path / "ok.msgpack"
    save_cassette(
        Cassette(
            interactions=[Interaction(request=RecordedRequest.from_options(options()), events=[], outcome=raised)]
        ),
        path,
    )
    assert check_cassette(path) == []


# -- scenario names: one rule for route and header -----------------------------------------------------------


@pytest.mark.parametrize("name", [" ", " lead", "trail ", "a?b", "a#b", "50%", "x" * 201])
def test_a_name_no_route_or_header_can_carry_is_refused(name: str) -> None:
    with pytest.raises(LlmError, match="field `name`") as caught:
        parse_scenarios({"scenarios": [{"name": name, "cassette": "c.msgpack"}]})
    assert caught.value.code is ErrorCode.INVALID_CONFIG


def test_every_accepted_name_is_a_valid_header_value_and_route(tmp_path: Path) -> None:
    """Served: each accepted name answers on its route and comes back in its header."""
    import httpx

    from chunktape.http import ReplayServer

    cassette = _three(tmp_path / "c.msgpack")
    names = ["测试", "rate-limited twice", "matrix[http-429]", "a b c", "ünï-😀"]
    scenarios = parse_scenarios({"scenarios": [{"name": name, "cassette": str(cassette)} for name in names]})
    with ReplayServer(scenarios=scenarios) as server:
        for name in names:
            body = {"model": "m", "messages": [{"role": "user", "content": "q0"}], "stream": True}
            reply = httpx.post(f"{server.url}/scenarios/{name}/v1/chat/completions", json=body, timeout=10)
            assert "x-chunktape-scenario" in reply.headers, (name, reply.status_code, reply.text)


async def test_a_streamed_bomb_from_a_provider_stops_at_the_cap_and_the_recording_names_it(
    fake_provider: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through RecordingTransport (what the proxy runs): the client gets a decoding error, never the expansion,
    and the interaction records INVALID_RESPONSE naming the encoding."""
    monkeypatch.setattr(_limits, "MAX_DECODED_BYTES", 1 << 20)
    fake_provider.enqueue(FakeResponse(body=_zeros(64 << 20, 31), headers={"content-encoding": "gzip"}))
    path = tmp_path / "bomb.msgpack"
    client = httpx2.AsyncClient(transport=RecordingTransport(httpx2.AsyncHTTPTransport(), path), timeout=10)
    with pytest.raises(httpx2.DecodingError, match="decodes to more than 1,048,576 bytes"):
        await client.post(fake_provider.url + "/v1/chat/completions", json=HELLO)
    await client.aclose()
    (interaction,) = _loaded(path).interactions
    assert isinstance(interaction.outcome, Raised)
    assert interaction.outcome.code == "INVALID_RESPONSE"
    assert "gzip content-encoding" in interaction.outcome.message


def _loaded(path: Path) -> Cassette:
    return load_cassette(path)


def test_a_number_msgpack_cannot_hold_is_one_line_and_json_still_takes_it(tmp_path: Path) -> None:
    """A JSON cassette may hold any integer (a request's ``seed`` spelled out in 30 digits); msgpack stops at 64
    bits. Converting, or recovering a journal, into msgpack was an ``unexpected OverflowError``; it is now
    ``CASSETTE_UNWRITABLE`` naming the way out, and nothing is written."""
    wide = GenerateOptions(model="m", messages=[Message(role="user", content="hi")], extra={"seed": 10**30})
    interaction = Interaction(
        request=RecordedRequest.from_options(wide),
        events=[Event(t_ns=n, chunk=c) for n, c in enumerate(text_stream("a"))],
        outcome=Completed(t_ns=9),
    )
    source = tmp_path / "wide.json"
    save_cassette(Cassette(interactions=[interaction]), source)
    target = tmp_path / "wide.msgpack"
    done = subprocess.run(
        [sys.executable, "-m", "chunktape", "convert", str(source), str(target)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "[CASSETTE_UNWRITABLE]" in lines[0]
    assert "write it with a .json suffix" in lines[0]
    assert not target.exists()
    again = CliRunner().invoke(app, ["convert", str(source), str(tmp_path / "copy.json")])
    assert again.exit_code == 0, again.output
    assert load_cassette(tmp_path / "copy.json").interactions[0].request.extra["seed"] == 10**30
