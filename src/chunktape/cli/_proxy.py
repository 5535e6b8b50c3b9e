"""``chunktape proxy``: record an agent in any language through a loopback proxy (a face over ``RecordingProxy``)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from chunktape.cli._common import Append, Force, check_output_suffix, check_writable_output, console

__all__ = ["proxy"]


class _Line(logging.Handler):
    """The proxy's events (and uvicorn's, which it words in one line) on stderr, one line each."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = " ".join(record.getMessage().split())
        except (TypeError, ValueError):
            message = " ".join(str(record.msg).split())
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def proxy(
    upstream: Annotated[
        str, typer.Option("--upstream", help="The provider's base URL, e.g. https://api.deepseek.com.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The cassette to record into (.msgpack or .json).")],
    host: Annotated[str, typer.Option("--host", help="The address to listen on (loopback only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="The port (0 picks a free one).")] = 8000,
    append: Append = False,
    force: Force = False,
) -> None:
    """Forward every request to --upstream and record its chat completions into the cassette, until Ctrl-C.

    Point the agent at http://HOST:PORT/v1 (its base URL) with its real key: the key goes upstream with the
    request and is never written. Streams pass through as they arrive, with their timing. The cassette is
    saved when the proxy stops. An existing cassette is left alone unless --append (add to it) or --force
    (replace it); an output that cannot be written is refused before the proxy listens.

    Example: chunktape proxy --upstream https://api.deepseek.com -o agent.msgpack --port 8080
    """
    from chunktape.http._server.proxy import RecordingProxy  # the server stack only for this command

    check_output_suffix(output, "--output")
    check_writable_output(output, force=force, append=append, what="--output")
    handler = _Line()
    for name in ("chunktape.proxy", "uvicorn.error"):
        events = logging.getLogger(name)
        events.addHandler(handler)
        events.propagate = False
    server = RecordingProxy(upstream, output, host=host, port=port, append=append)
    out = console()
    out.print(
        f"recording {server.shown_upstream} into {output} on {server.url}  (OpenAI base URL: {server.url}/v1)",
        markup=False,
        soft_wrap=True,
    )
    out.print("press Ctrl-C to stop and save", style="dim")
    server.run()
    written = server.written
    if written is None:
        out.print(f"nothing was recorded; {output} was not written", markup=False, soft_wrap=True)
    else:
        out.print(f"saved {written}", markup=False, soft_wrap=True)
