"""``chunktape import-vcr``: a vcrpy cassette of chat completions as a chunk cassette.

A module of its own: the vcrpy bridge loads every wire protocol, which no other command over files needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chunktape._cassettes.redaction import env_secrets, redact
from chunktape.cli._common import (
    Append,
    Force,
    check_output_suffix,
    check_writable_output,
    console,
    err_console,
    write_cassette,
)
from chunktape.http._vcr import VcrSerializer, read_vcr

__all__ = ["import_vcr"]


def import_vcr(
    source: Annotated[Path, typer.Argument(help="A vcrpy cassette of chat completions (streamed or not).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The chunk cassette to write.", show_default=False)],
    serializer: Annotated[
        VcrSerializer,
        typer.Option(
            help="The serializer the cassette was written with: vcrpy's yaml or json, or parsed-body "
            "(pydantic-ai's json_body_serializer); auto detects them.",
        ),
    ] = VcrSerializer.AUTO,
    keep_undecodable: Annotated[
        bool,
        typer.Option(
            "--keep-undecodable",
            help="Import a response that cannot be decoded as a raised INVALID_RESPONSE (and skip a request "
            "that cannot be read) instead of failing.",
        ),
    ] = False,
    force: Force = False,
    append: Append = False,
) -> None:
    """Convert a vcrpy cassette of OpenAI-compatible chat completions into a chunk cassette.

    Other traffic (/models, /embeddings...) is skipped with a note on stderr. An interaction that cannot be
    decoded fails the import, naming it, unless --keep-undecodable. An existing output cassette is left alone
    unless --append (add the imported interactions to it) or --force (replace it).

    Example: chunktape import-vcr tests/cassettes/chat.yaml -o chat.msgpack
    """
    check_output_suffix(output, "--output")
    imported = read_vcr(source, serializer=serializer, keep_undecodable=keep_undecodable)
    check_writable_output(output, force=force, append=append, what="--output")
    err = err_console()
    for note in imported.notes:
        err.print(note, style="dim", markup=False, soft_wrap=True)
    cassette = redact(imported.cassette, env_secrets().values())  # skips interactions holding no secret
    write_cassette(cassette, output, append=append)
    console().print(
        f"imported {len(cassette.interactions)} interaction(s) from {source} into {output}",
        markup=False,
        soft_wrap=True,
    )
