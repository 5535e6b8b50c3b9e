"""The run's upkeep, once every test has reported: ``--tape-prune`` (the cassettes no collected test used) and
``--tape-report`` (an HTML report of the cassettes the run used).

Each test with the ``tape`` fixture reports the cassette it uses in its teardown report (``USES``), so under
pytest-xdist the controller hears of every worker's tests; a test that never reached its fixture (a skip, an
error before it) reports the cassette it would use. The controller (or the only process) then decides here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import pytest

from chunktape._cassettes.codec import load_cassette
from chunktape._cassettes.model import Cassette
from chunktape._cassettes.redaction import env_secrets, redact
from chunktape._errors import LlmError
from chunktape._report.html import ReportSource, render_report, write_report
from chunktape._report.orphans import orphans
from chunktape.pytest._paths import shown

__all__ = ["USES", "Upkeep", "partial_selection"]

USES: Final = "chunktape-uses"
"""A teardown report's property: ``{"path", "root", "ran"}``, the cassette the test uses and the folder searched."""
_KEPT: Final = "chunktape"


def partial_selection(config: pytest.Config) -> str | None:
    """Why this run's selection leaves tests out (``-k``, ``-m``, files or node ids given...), or None for a run of
    the whole suite (no argument, or only the rootdir or ``testpaths`` folders)."""
    option = config.option
    for flag, value in (
        ("-k", getattr(option, "keyword", "")),
        ("-m", getattr(option, "markexpr", "")),
        ("--deselect", getattr(option, "deselect", None)),
        ("--lf", getattr(option, "lf", False)),
        ("--sw", getattr(option, "stepwise", False)),
        ("--collect-only", getattr(option, "collectonly", False)),
    ):
        if value:
            return f"{flag} given"
    if config.args_source is not pytest.Config.ArgsSource.ARGS:
        return None
    whole = {config.rootpath.resolve()}
    whole |= {(config.rootpath / str(path)).resolve() for path in config.getini("testpaths")}
    for arg in config.args:
        path = (config.invocation_params.dir / arg).resolve()
        if "::" in arg or path not in whole:
            return f"selected {arg}"
    return None


class Upkeep:
    """Collects what the tests reported, then prunes and writes the report at the end of the session."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.uses: dict[str, dict[str, Any]] = {}
        self.kept_aside: dict[str, str] = {}
        self.finished: set[str] = set()
        self.collect_errors = 0
        self.orphans: list[Path] = []
        self.deleted: list[Path] = []
        self.refused: str | None = None
        self.report: tuple[Path, int, int] | None = None

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors += 1

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        self.finished.add(report.nodeid)
        for name, value in report.user_properties:
            if name == USES and isinstance(value, Mapping):
                self.uses[report.nodeid] = dict(value)
            elif name == _KEPT and isinstance(value, Mapping) and value.get("failed") and "interactions" in value:
                self.kept_aside[str(value["path"])] = report.nodeid

    def _incomplete(self, session: pytest.Session) -> str | None:
        if self.collect_errors:
            return f"{self.collect_errors} collection error(s)"
        missing = session.testscollected - len(self.finished)
        if missing > 0 or session.shouldstop or session.shouldfail:
            return f"the run stopped early: {max(missing, 0)} of {session.testscollected} test(s) did not run"
        unknown = [use for use in self.uses.values() if not use.get("ran")]
        if unknown and any(use.get("overridden") for use in self.uses.values()):
            return (
                f"{len(unknown)} test(s) did not reach their tape fixture and tape_dir is overridden: their cassettes "
                "cannot be told"
            )
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        prune = self.config.getoption("tape_prune")
        if prune is not None:
            roots = [Path(use["root"]) for use in self.uses.values()]
            self.orphans = orphans(roots, [Path(use["path"]) for use in self.uses.values()])
            self.refused = partial_selection(self.config) or self._incomplete(session)
            if prune == "delete" and self.refused is None:
                for path in self.orphans:
                    path.unlink(missing_ok=True)
                    self.deleted.append(path)
        target = self.config.getoption("tape_report")
        if target is not None:
            self._write_report(self.config.invocation_params.dir / str(target))

    def _write_report(self, target: Path) -> None:
        users: dict[str, list[str]] = {}
        for nodeid, use in self.uses.items():
            if use.get("ran"):
                users.setdefault(str(use["path"]), []).append(nodeid)
        sources: list[ReportSource] = []
        for path, nodeids in sorted(users.items()):
            cassette = _readable(Path(path))
            if cassette is not None:
                listed = ", ".join(nodeids[:3]) + (f" and {len(nodeids) - 3} more" if len(nodeids) > 3 else "")
                label = shown(self.config, Path(path))
                sources.append(ReportSource(label=label, cassette=cassette, note=f"used by {listed}"))
        for path, nodeid in sorted(self.kept_aside.items()):
            cassette = _readable(self.config.rootpath / path)
            if cassette is not None:
                note = f"kept aside: {nodeid} did not pass while recording"
                sources.append(ReportSource(label=path, cassette=cassette, note=note))
        title = f"chunktape report: {self.config.rootpath.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        write_report(render_report(sources, title=title), target)
        self.report = (target, len(sources), sum(len(source.cassette.interactions) for source in sources))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.config.getoption("tape_prune") is None and self.report is None:
            return
        terminalreporter.write_sep("-", "chunktape upkeep")
        prune = self.config.getoption("tape_prune")
        if prune is not None:
            folders = sorted({shown(self.config, Path(use["root"])) for use in self.uses.values()})
            where = ", ".join(folders) if folders else "no tape folder"
            if self.orphans:
                verb = "deleted" if self.deleted else "no collected test used"
                terminalreporter.write_line(f"chunktape: {len(self.orphans)} cassette(s) under {where} {verb}:")
                for path in self.orphans:
                    terminalreporter.write_line(f"  {shown(self.config, path)}")
            elif self.refused is None and not folders:
                terminalreporter.write_line("chunktape: no collected test uses the tape fixture: nothing to prune")
            elif self.refused is None:
                terminalreporter.write_line(f"chunktape: every cassette under {where} is used by a collected test")
            if self.refused is not None:
                action = "deleted nothing" if prune == "delete" else "listed only"
                terminalreporter.write_line(
                    f"chunktape: the run was partial ({self.refused}): {action}; a cassette of a test left out would "
                    "look unused"
                )
            elif self.orphans and not self.deleted:
                terminalreporter.write_line("chunktape: remove them with --tape-prune=delete (after a full run)")
        if self.report is not None:
            path, cassettes, interactions = self.report
            terminalreporter.write_line(
                f"chunktape: wrote the report {shown(self.config, path)} ({cassettes} cassette(s), "
                f"{interactions} interaction(s))"
            )


def _readable(path: Path) -> Cassette | None:
    """The cassette at ``path`` as a report may show it (every credential masked, as ``chunktape report`` does),
    or None when it cannot be read."""
    try:
        return redact(load_cassette(path), env_secrets().values())
    except LlmError:
        return None
