"""``chunktape serve``: the loopback OpenAI-compatible replay server (a thin face over ``chunktape.http.serve``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from chunktape._cassettes.matching import DEFAULT_MATCH, MATCHERS
from chunktape._errors import ErrorCode, LlmError
from chunktape._replayer.options import ReplayOptions
from chunktape._replayer.timing import Timing
from chunktape.cli._common import EXIT_USAGE, CliError, console, err_console, parse_fault_option, timing_option
from chunktape.http._server.limits import MAX_BODY_BYTES

if TYPE_CHECKING:
    from chunktape.http import ReplayServer

__all__ = ["serve"]


def serve(
    cassettes: Annotated[
        list[Path] | None, typer.Argument(help="Cassettes to serve (merged, in order).", show_default=False)
    ] = None,
    host: Annotated[str, typer.Option("--host", help="The address to listen on (loopback only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="The port (0 picks a free one).")] = 8000,
    speed: Annotated[
        float | None, typer.Option("--speed", help="Replay the recorded timing this many times faster.")
    ] = None,
    instant: Annotated[bool, typer.Option("--instant", help="Replay without any delay.")] = False,
    fault: Annotated[
        list[str] | None,
        typer.Option("--fault", "-f", help="A fault for the default routes: a standard fault id or a JSON spec."),
    ] = None,
    scenarios: Annotated[
        Path | None,
        typer.Option("--scenarios", help="A scenario file (.toml/.json): one route per scenario."),
    ] = None,
    repeat: Annotated[
        bool,
        typer.Option("--repeat", help="Let an interaction be played again (clients that rerun their suite)."),
    ] = False,
    match_on: Annotated[
        str | None,
        typer.Option(
            "--match-on",
            help="The request fields a recorded interaction must match, comma-separated "
            f"(default: {','.join(DEFAULT_MATCH)}; also: {', '.join(sorted(set(MATCHERS) - set(DEFAULT_MATCH)))}).",
            show_default=False,
        ),
    ] = None,
    allow_remote: Annotated[
        bool, typer.Option("--allow-remote", help="Allow a non-loopback --host (only on a trusted network).")
    ] = False,
    max_body: Annotated[
        int,
        typer.Option("--max-body", min=1, help="The largest request body in bytes; a larger one is answered 413."),
    ] = MAX_BODY_BYTES,
    script: Annotated[
        Path | None,
        typer.Option(
            "--script",
            help="Answer from a script of turns you write (.toml/.json: text, tool calls, usage, finish, errors) "
            "instead of cassettes: a provider for your own conversation.",
        ),
    ] = None,
    record: Annotated[
        Path | None,
        typer.Option(
            "--record",
            "-o",
            help="With --script: record every answer, with the client's real requests, into this cassette "
            "(saved on Ctrl-C).",
        ),
    ] = None,
) -> None:
    """Serve cassettes as an OpenAI-compatible chat-completions API on a loopback address, until Ctrl-C.

    POST /v1/chat/completions replays the cassettes. With --scenarios, each scenario also answers at
    /scenarios/<name>/v1/chat/completions (or with the header X-Chunktape-Scenario: <name>), and
    GET /scenarios lists them, so an agent in any language runs its fault matrix against one server.

    Each interaction plays once (like a replay in tests), counted once its last event reached the client; a
    client that disconnects or times out before that leaves it for its retry. --repeat, or POST /reset, lets a
    client run again; a request no interaction matches is answered 418 (x-chunktape-error: CASSETTE_MISMATCH).

    With --script FILE the server is a provider you write: it answers each request with the next turn of
    the script (text, tool calls, usage, finish, HTTP and in-stream errors; --fault on top), and with
    --record OUT it records your agent's real requests and those answers into a cassette its tests replay.

    Example: chunktape serve cassettes/demo-session.msgpack --port 8000 --speed 2
    Example: chunktape serve --script turns.toml --record tests/cassettes/agent.msgpack
    """
    if script is not None and cassettes:
        raise CliError("give cassettes or --script FILE, not both", EXIT_USAGE)
    if record is not None and script is None:
        raise CliError("--record goes with --script (a replay records nothing; chunktape proxy records)", EXIT_USAGE)
    if not cassettes and scenarios is None and script is None:
        raise CliError("give at least one cassette, --scenarios FILE or --script FILE", EXIT_USAGE)
    for path in cassettes or []:
        if not path.exists():  # a cassette miss: the command line's next step (with_cli_hint) says how to record one
            raise LlmError(f"{path} does not exist", ErrorCode.CASSETTE_NOT_FOUND)
    for path in [*(cassettes or []), *(extra for extra in (scenarios, script) if extra is not None)]:
        if not path.is_file():
            raise CliError(f"{path} does not exist" if not path.exists() else f"{path} is not a file")
    options = ReplayOptions(
        timing=timing_option(speed, instant, Timing.recorded()),
        faults=parse_fault_option(fault or []),
        allow_repeats=repeat,
        match_on=DEFAULT_MATCH if match_on is None else match_on,
    )
    from chunktape.http import ServerLimits  # the server stack only for this command
    from chunktape.http import serve as serve_http

    out = console()

    def announce(server: ReplayServer) -> None:
        if server.remote_warning is not None:
            err_console().print(server.remote_warning, markup=False, soft_wrap=True, style="yellow")
        out.print(f"serving on {server.url}  (OpenAI base URL: {server.url}/v1)", markup=False, soft_wrap=True)
        if script is not None:
            what = f"; recording into {record}" if record is not None else ""
            out.print(f"answering from the script {script}{what}", markup=False, soft_wrap=True)
        for name in server.scenarios:
            out.print(f"  scenario {name}: {server.url}/scenarios/{name}/v1", markup=False, soft_wrap=True)
        out.print("press Ctrl-C to stop", style="dim")

    serve_http(
        [str(path) for path in cassettes or []],
        host=host,
        port=port,
        replay_options=options,
        scenarios=scenarios,
        allow_remote=allow_remote,
        limits=ServerLimits(max_body=max_body),
        on_ready=announce,
        script=script,
        record=record,
    )
    if record is not None:
        out.print(
            f"saved {record}" if record.exists() else f"nothing was answered: {record} not written",
            markup=False,
            soft_wrap=True,
        )
