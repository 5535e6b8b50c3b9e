"""Commands over cassette files: show, check, convert, diff, redact, recover (import-vcr: ``_import_vcr``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import typer

from chunktape._cassettes.journal import held_journal, journal_path, live_journal, recover, recovered_path
from chunktape._cassettes.model import Interaction
from chunktape._cassettes.redaction import check_secrets, env_secrets, redact
from chunktape._cassettes.store import append_interactions, save_cassette
from chunktape._errors import LlmError
from chunktape._report.analysis import (
    InteractionSummary,
    check_cassette,
    diff_cassettes,
    find_cassette_files,
    protocol_violation,
    summarize,
)
from chunktape._secrets import redact_text
from chunktape.cli._common import (
    EXIT_FAILED,
    EXIT_USAGE,
    Append,
    CliError,
    Force,
    LongGap,
    ShowSecrets,
    check_output_suffix,
    check_writable_output,
    console,
    err_console,
    gap_threshold,
    load,
    shown,
    write_cassette,
)
from chunktape.cli._render import printable, printable_json, summary_table

__all__ = ["check", "convert", "diff", "recover_journal", "redact_cassette", "show"]

CassetteArg = Annotated[Path, typer.Argument(help="A cassette file (.msgpack or .json).", show_default=False)]


def show(
    cassette: CassetteArg,
    json: Annotated[bool, typer.Option("--json", help="Print the whole cassette as stable, sorted JSON.")] = False,
    timeline: Annotated[
        bool,
        typer.Option(
            "--timeline",
            help="Draw each interaction's timing: chunk arrivals, block spans, long gaps, where it ended or failed.",
        ),
    ] = False,
    compact: Annotated[
        bool | None,
        typer.Option(
            "--compact/--full",
            help="With --timeline: one line per interaction, or every one in full (default: compact from "
            "10 interactions on).",
            show_default=False,
        ),
    ] = None,
    long_gap: LongGap = None,
    show_secrets: ShowSecrets = False,
) -> None:
    """Show a cassette: one row per interaction (model, last user message, chunks, timing, usage, outcome).

    `--timeline` draws each interaction on its own time scale: time to first chunk, the chunks' arrivals,
    each block's span, the gaps (long ones shaded) and where the stream ended, raised or was cut short (an
    injected fault marked !). `--json` prints the cassette as sorted, indented JSON, stable enough to be a
    git textconv. Credentials are masked, also those the cassette was allowed to keep, unless --show-secrets.

    Example: chunktape show --timeline cassettes/demo-session.msgpack
    """
    if json and timeline:
        raise CliError("use either --json or --timeline, not both", EXIT_USAGE)
    loaded = shown(load(cassette), show_secrets)
    if json:
        data = msgspec.json.format(msgspec.json.encode(loaded, order="sorted"), indent=2)
        typer.echo(printable_json(data.decode()))
        return
    out = console()
    meta = loaded.meta
    title = f"{cassette}  ·  {len(loaded.interactions)} interaction(s)  ·  {meta.recorder}, adapter {meta.adapter!r}"
    if timeline:
        from chunktape._report.timeline import timeline as timeline_of
        from chunktape.cli._timeline import render_timelines

        threshold = gap_threshold(long_gap)
        items = [timeline_of(item, index, long_gap_ns=threshold) for index, item in enumerate(loaded.interactions)]
        render_timelines(out, title, items, compact=compact)
        return
    summaries = [_marked(summarize(item, index), item) for index, item in enumerate(loaded.interactions)]
    out.print(summary_table(title, summaries))


def _marked(summary: InteractionSummary, interaction: Interaction) -> InteractionSummary:
    """The summary, its outcome marked when the recorded stream breaks a protocol rule (it would fail a consumer)."""
    violation = protocol_violation(interaction)
    if violation is None:
        return summary
    return msgspec.structs.replace(summary, outcome=f"VIOLATES {violation.rule}: {summary.outcome}")


def check(
    paths: Annotated[list[Path], typer.Argument(help="Cassette files or folders (searched recursively).")],
    max_age: Annotated[
        str | None,
        typer.Option(
            "--max-age",
            metavar="AGE",
            help="Also fail a cassette recorded longer ago than AGE (30d, 12h, 2w; units s, m, h, d, w).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Validate cassettes: format, version, timing and the StreamChunk protocol rules; with --max-age, their age.

    Folders are searched recursively for *.msgpack and *.json files; JSON files there that are not cassettes
    (no top-level version and interactions) are skipped with a note. Prints one line per failing file (path,
    interaction, rule) and exits 1 if any fails, 3 if a path does not exist (every other path is still
    checked); exits 0 when all pass. A cassette's age is the time since it was first recorded.

    Example: chunktape check --max-age 30d tests/cassettes
    """
    oldest = None
    if max_age is not None:
        from chunktape._report.staleness import parse_age

        try:
            oldest = parse_age(max_age, "--max-age")
        except LlmError as error:
            raise CliError(error.message.replace("--max-age=", "--max-age "), EXIT_USAGE) from None
    found = find_cassette_files(paths)
    files = found.files
    err = err_console()
    for path in found.skipped:
        err.print(f"skipped {path}: JSON but not a cassette", style="dim", markup=False, soft_wrap=True)
    if not files:
        raise CliError("no cassette files (*.msgpack, *.json) under the given paths")
    failures: list[str] = []
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn  # check's alone: not at the start

    with Progress(
        TextColumn("checking"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        console=err,
        transient=True,
        disable=len(files) < 2 or not err.is_terminal,
    ) as progress:
        task = progress.add_task("", total=len(files))
        for path in files:
            progress.update(task, description=path.name)
            problems = check_cassette(path, max_age=oldest)
            if problems:
                more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
                failures.append(f"{problems[0]}{more}")
            progress.advance(task)
    out = console()
    for line in failures:
        out.print(printable(redact_text(line)), markup=False, soft_wrap=True)
    passed = len(files) - len(failures)
    summary = f"{passed} of {len(files)} cassette file(s) pass"
    missing = [path for path in files if not path.exists()]
    if missing:
        gone = "; ".join(f"{path} does not exist" for path in missing)
        raise CliError(f"{summary}; {len(failures)} failed; {gone}")
    if failures:
        err.print(f"{summary}; {len(failures)} failed", style="red", soft_wrap=True)
        raise typer.Exit(EXIT_FAILED)
    out.print(summary, style="green", soft_wrap=True)


def convert(
    source: Annotated[Path, typer.Argument(help="The cassette to read.", show_default=False)],
    target: Annotated[Path, typer.Argument(help="Where to write it; .json or .msgpack picks the encoding.")],
    force: Force = False,
    append: Append = False,
) -> None:
    """Convert a cassette between msgpack and JSON, losslessly (the suffix of TARGET picks the encoding).

    An existing TARGET is left alone unless --append (add the interactions to it) or --force (replace it).

    Example: chunktape convert session.msgpack session.json
    """
    check_output_suffix(target)
    loaded = load(source)
    check_writable_output(target, force=force, append=append)
    if target.exists() and source.exists() and target.samefile(source) and append:
        raise CliError(f"{target} is the source itself; --append would double it")
    written = write_cassette(loaded, target, append=append)
    console().print(f"wrote {target} ({len(written.interactions)} interaction(s))", markup=False, soft_wrap=True)


def diff(
    old: Annotated[Path, typer.Argument(help="The first cassette.", show_default=False)],
    new: Annotated[Path, typer.Argument(help="The second cassette.", show_default=False)],
    summary: Annotated[
        bool,
        typer.Option(
            "--summary",
            help="Say in words what changed (text, tool calls, outcome, usage by N tokens, timing by N ms), as "
            "for two recordings of the same test.",
        ),
    ] = False,
    show_secrets: ShowSecrets = False,
) -> None:
    """Compare two cassettes interaction by interaction: requests, chunks and text, outcomes, timing shift.

    Exits 0 when the content is the same (timing may still shift), 1 when it differs. Credentials are
    masked, unless --show-secrets; a difference in credentials alone is still reported, as such.

    Example: chunktape diff --summary before.msgpack after.msgpack
    """
    before, after = load(old), load(new)
    if summary:
        from chunktape._report.drift import drift_summary

        drift = drift_summary(shown(before, show_secrets), shown(after, show_secrets))
        changes = drift.changes
        if drift.same and not show_secrets and not drift_summary(before, after).same:
            changes = ["credentials changed (masked here; --show-secrets prints them)"]
        for line in [*changes, *([drift.timing] if drift.timing else [])] or ["no change"]:
            console().print(printable(line), markup=False, soft_wrap=True)
        if changes:
            raise typer.Exit(EXIT_FAILED)
        return
    names = (old.name, new.name) if old.name != new.name else (str(old), str(new))
    result = diff_cassettes(shown(before, show_secrets), shown(after, show_secrets), names=names)
    if result.same and not show_secrets and not diff_cassettes(before, after).same:
        result = msgspec.structs.replace(
            result, changes=["credentials differ (masked here; --show-secrets prints them)"]
        )
    out = console()
    for line in result.changes:
        out.print(printable(line), markup=False, soft_wrap=True)
    for line in result.timing:
        out.print(f"timing: {printable(line)}", style="dim", markup=False, soft_wrap=True)
    if not result.same:
        err_console().print(f"{len(result.changes)} difference(s)", style="red", soft_wrap=True)
        raise typer.Exit(EXIT_FAILED)
    out.print("same content" + ("" if result.timing else " and timing"), style="green", soft_wrap=True)


def redact_cassette(
    cassette: CassetteArg,
    secret: Annotated[
        list[str] | None,
        typer.Option("--secret", "-s", help="A literal to redact (repeatable), besides credential environment values."),
    ] = None,
    patterns: Annotated[
        bool, typer.Option("--patterns/--no-patterns", help="Also redact key-shaped strings (sk-..., ghp_...).")
    ] = True,
) -> None:
    """Redact credentials from a cassette, in place (atomic write).

    Redacts the given --secret values, the values of environment variables whose names contain KEY, TOKEN,
    SECRET, PASSWORD, PASSWD or CREDENTIAL, and key-shaped strings; each becomes [REDACTED].

    Example: chunktape redact session.msgpack --secret "$MY_PROXY_PASSWORD"
    """
    loaded = load(cassette)
    secrets = [*(secret or []), *env_secrets().values()]
    cleaned = redact(loaded, secrets, patterns=patterns)
    changed = sum(1 for a, b in zip(loaded.interactions, cleaned.interactions, strict=True) if a != b)
    if cleaned == loaded:
        console().print(f"{cassette}: nothing to redact", markup=False, soft_wrap=True)
        return
    save_cassette(cleaned, cassette)
    console().print(f"{cassette}: redacted {changed} interaction(s)", markup=False, soft_wrap=True)


def recover_journal(
    journal: Annotated[Path, typer.Argument(help="The journal a crashed recording left (<cassette>.journal).")],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="The cassette to write (default: the journal's cassette; c.recovered-<N or stamp>.msgpack for a "
            "journal.N or one set aside as crashed).",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing cassette.")] = False,
    append: Annotated[
        bool, typer.Option("--append", help="Add the recovered interactions to an existing cassette.")
    ] = False,
    keep_journal: Annotated[bool, typer.Option("--keep-journal", help="Do not delete the journal afterwards.")] = False,
) -> None:
    """Turn the journal of an interrupted recording into a cassette; the last interaction is marked cut short.

    Credentials in the environment (names containing KEY, TOKEN, SECRET, PASSWORD...) and key-shaped strings are
    redacted first.

    A file that is not a journal (a cassette, an empty file) is refused and left alone, as is the journal of a
    recording still running; the journal is deleted only once the cassette holding what it recovered is written
    and fsynced.

    Example: chunktape recover session.msgpack.journal -o session.msgpack
    """
    if journal.is_dir():
        raise CliError(f"{journal} is a directory, not a journal file")
    if output is not None:
        check_output_suffix(output, "--output")
    target = output or recovered_path(journal)
    if target.exists() and journal.exists() and target.samefile(journal):
        if output is None:  # no .journal suffix to take off: most likely a cassette given for its journal
            raise CliError(
                f"{journal} is not named as a journal: give its recording's journal ({journal_path(journal)}), or "
                "--output if this file is one"
            )
        raise CliError(f"{target} is the journal itself; give another --output")
    with held_journal(journal) as free:  # held until the journal is gone: no recorder claims it meanwhile
        if not free:
            raise CliError(
                f"{journal} is still being recorded by a live process; it saves its cassette itself when it stops "
                "(recover only what a crashed recording left)"
            )
        live = None if output is not None else live_journal(target, besides=journal)
        if live is not None:
            raise CliError(f"{target} is being recorded now by a live process (its journal {live}); give -o")
        if target.exists() and not (force or append):
            raise CliError(f"{target} exists; pass --append to add to it or --force to replace it")
        secrets = list(env_secrets().values())
        cassette = redact(recover(journal), secrets)  # CASSETTE_CORRUPT (nothing touched) if it is not a journal
        check_secrets(cassette, secrets, destination=target)
        if append:  # re-read under the writers' lock, as every appending save does
            cassette = append_interactions(target, cassette.interactions, cassette.meta, tool_runs=cassette.tool_runs)
        else:
            save_cassette(cassette, target)  # atomic and fsynced: only then may the journal go
        if not keep_journal:
            journal.unlink(missing_ok=True)
    console().print(
        f"recovered {len(cassette.interactions)} interaction(s) into {target}", markup=False, soft_wrap=True
    )
