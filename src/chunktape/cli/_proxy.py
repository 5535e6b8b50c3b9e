"""``chunktape proxy``: record an agent in any language through a loopback proxy (a face over ``RecordingProxy``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chunktape.cli._common import console

__all__ = ["proxy"]


def proxy(
    upstream: Annotated[
        str, typer.Option("--upstream", help="The provider's base URL, e.g. https://api.deepseek.com.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The cassette to record into (.msgpack or .json).")],
    host: Annotated[str, typer.Option("--host", help="The address to listen on (loopback only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="The port (0 picks a free one).")] = 8000,
    append: Annotated[
        bool, typer.Option("--append", help="Add to an existing cassette instead of replacing it.")
    ] = False,
) -> None:
    """Forward every request to --upstream and record its chat completions into the cassette, until Ctrl-C.

    Point the agent at http://HOST:PORT/v1 (its base URL) with its real key: the key goes upstream with the
    request and is never written. Streams pass through as they arrive, with their timing. The cassette is
    saved when the proxy stops.

    Example: chunktape proxy --upstream https://api.deepseek.com -o agent.msgpack --port 8080
    """
    from chunktape.http._server.proxy import RecordingProxy  # the server stack only for this command

    server = RecordingProxy(upstream, output, host=host, port=port, append=append)
    out = console()
    out.print(
        f"recording {upstream} into {output} on {server.url}  (OpenAI base URL: {server.url}/v1)",
        markup=False,
        soft_wrap=True,
    )
    out.print("press Ctrl-C to stop and save", style="dim")
    server.run()
    out.print(f"saved {output}", markup=False, soft_wrap=True)
