"""``chunktape report``: one self-contained HTML page, checked as text and in a real headless Chromium (Debian's
package, driven by its own command line): it loads with no console message, draws one chart per interaction, its
filters work, and its screenshot shows the charts' colours."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from chunktape import Cassette, load_cassette, save_cassette
from chunktape.faults import Disconnect, Stall
from helpers import cassette_of, interaction_of, record_through_faults, run_pytest, text_stream
from png import read_png

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "cassettes" / "demo-session.msgpack"
SCRIPT = Path(sys.executable).parent / "chunktape"
INSTALL = ROOT / "scripts" / "install_chromium.sh"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
]
CONSOLE = re.compile(r":CONSOLE(?:\(\d+\))?[^\]]*\] (.*)$", re.M)
PURPLE, GREEN, ORANGE = (0x7A, 0x4F, 0xD0), (0x1D, 0x7F, 0x4E), (0xC4, 0x6C, 0x12)
"""The fills of reasoning, text and tool-call blocks (the page's --reasoning, --text, --tool)."""


def _chunktape(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Cassette]:
    """The demo's requests replayed through a stall and a disconnect, recorded: a session with a long gap, a
    recorded injected fault and two completed calls."""
    path = tmp_path_factory.mktemp("session") / "faulty.msgpack"
    return path, record_through_faults(DEMO, path, [Stall(after_chunks=10, seconds=2.0), Disconnect(after_chunks=20)])


@pytest.fixture(scope="module")
def page(session: tuple[Path, Cassette], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    done = _chunktape("report", session[0], DEMO, "-o", out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {out}: 2 cassette(s), 6 interaction(s)"
    return out


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium; installed now (as ``make test`` does) if missing and apt-get is usable, else a skip."""
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found is None:
        said = subprocess.run(["sh", str(INSTALL)], capture_output=True, text=True, timeout=900, check=False)
        found = shutil.which("chromium")
        if found is None:
            pytest.skip(f"chromium cannot be installed here: {said.stdout.strip() or said.stderr.strip()}")
    return found


class _Links(HTMLParser):
    """Every ``src``/``href`` of the page's elements, and the tags it has."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.links.extend(value or "" for name, value in attrs if name in ("src", "href"))


def _browse(chromium: str, tmp_path: Path, url: str, *args: str) -> tuple[str, list[str]]:
    """What ``chromium --headless ARGS URL`` printed, and every console message the page logged."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    done = subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={profile}", *args, url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, CONSOLE.findall(done.stderr)


def test_the_page_is_self_contained_and_escapes_what_was_recorded(tmp_path: Path) -> None:
    hostile = "<script>alert('x')</script> & <img src=https://example.invalid/p.png>"
    cassette = tmp_path / "hostile.msgpack"
    save_cassette(cassette_of(interaction_of(text_stream("hi"), content=hostile)), cassette)
    out = tmp_path / "r.html"
    assert _chunktape("report", cassette, "-o", out).returncode == 0
    text = out.read_text(encoding="utf-8")
    assert "default-src 'none'" in text  # the page may fetch nothing, whatever it holds
    assert "<script>alert" not in text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text
    parser = _Links()
    parser.feed(text)
    assert parser.links  # the table's rows link to their charts...
    assert all(link.startswith("#") for link in parser.links)  # ...and nothing points out of the page
    assert parser.tags >= {"svg", "table", "script", "style"}
    assert text.count('<svg class="timeline"') == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "report.txt"], "--output report.txt: give a .html file name"),
        (["--long-gap", "-1", "-o", "r.html"], "--long-gap must be > 0 seconds, got -1"),
    ],
)
def test_bad_report_options_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = _chunktape("report", DEMO, *args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"chunktape: error: {message}"]


def test_a_missing_cassette_is_one_line_and_exit_3(tmp_path: Path) -> None:
    done = _chunktape("report", tmp_path / "nope.msgpack", "-o", tmp_path / "r.html")
    assert done.returncode == 3
    assert "CASSETTE_NOT_FOUND" in done.stderr
    assert not (tmp_path / "r.html").exists()


def test_the_console_check_sees_errors(chromium: str, tmp_path: Path) -> None:
    """The check the report passes below is not blind: a page that logs and throws is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><p>x</p><script>console.error('boom'); notDefined();</script>")
    _, messages = _browse(chromium, tmp_path, bad.as_uri(), "--dump-dom")
    assert any("boom" in message for message in messages)
    assert any("notDefined is not defined" in message for message in messages)


def test_the_report_loads_in_chromium_with_a_chart_per_interaction(
    chromium: str, page: Path, session: tuple[Path, Cassette], tmp_path: Path
) -> None:
    dom, messages = _browse(chromium, tmp_path, page.as_uri(), "--dump-dom")
    assert messages == []  # no error, no warning, no refused fetch
    interactions = len(session[1].interactions) + len(load_cassette(DEMO).interactions)
    assert f'data-charts="{interactions}"' in dom  # counted by the page's script, once it ran
    assert f'data-shown="{interactions}"' in dom
    assert dom.count('<svg class="timeline"') == interactions
    assert f"{interactions} of {interactions} interaction(s) shown" in dom
    assert dom.count('class="gap long"') == 1  # the stall
    assert dom.count('class="marker fault"') == 1
    assert "injected fault disconnect-after-20-chunks" in dom


def test_the_filters_pick_interactions_out(chromium: str, page: Path, tmp_path: Path) -> None:
    for fragment, shown in [("outcome=fault", 1), ("outcome=completed", 5), ("q=read_file", 2), ("long=1", 1)]:
        dom, messages = _browse(chromium, tmp_path, f"{page.as_uri()}#{fragment}", "--dump-dom")
        assert messages == []
        assert f'data-shown="{shown}"' in dom, fragment
        sections = re.findall(r'<section class="interaction[^"]*"[^>]*>', dom)
        assert sum("hidden" not in section for section in sections) == shown, fragment


def test_a_screenshot_of_the_report_shows_its_charts(chromium: str, page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    # Every compositor stage done before the frame is drawn: on a busy machine a shot could catch a frame whose
    # tiles were only partly rastered (a tenth of the fills drawn).
    args = (f"--screenshot={shot}", "--window-size=1000,1100", "--run-all-compositor-stages-before-draw")
    _, messages = _browse(chromium, tmp_path, page.as_uri(), *args)
    assert messages == []
    image = read_png(shot)
    assert (image.width, image.height) == (1000, 1100)
    colours = image.histogram()
    blank = colours.most_common(1)[0][1]
    assert blank < 0.97 * image.width * image.height  # not a blank page
    assert len(colours) > 50  # text, lines and fills, not a flat image
    for fill in (PURPLE, GREEN, ORANGE):  # the block spans of the first charts, drawn
        assert colours[fill] > 200, (fill, colours[fill])


def test_the_runs_report_loads_in_chromium_too(chromium: str, pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The page ``--tape-report`` writes at the end of a pytest run is the same page: no console message, a chart
    per interaction, its test named."""
    from test_upkeep import _project

    _project(pytester)
    run_pytest(pytester, "--tape-mode", "once", "--tape-report", "report.html").assert_outcomes(passed=2, skipped=1)
    dom, messages = _browse(chromium, tmp_path, (pytester.path / "report.html").as_uri(), "--dump-dom")
    assert messages == []
    assert 'data-charts="1"' in dom
    assert dom.count('<svg class="timeline"') == 1
    assert "used by test_x.py::test_hi" in dom


def test_the_install_step_never_fails_where_chromium_cannot_be_installed(tmp_path: Path) -> None:
    """``make test``'s chromium step: a note and exit 0 where apt-get is not there; silent where chromium is."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("id",):  # what the script needs besides the shell; no apt-get
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    env = {"PATH": str(bin_dir), "CHROMIUM": str(tmp_path / "no-chromium")}
    done = subprocess.run(["/bin/sh", str(INSTALL)], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "apt-get is not usable here" in done.stdout
    present = subprocess.run(
        ["/bin/sh", str(INSTALL)], capture_output=True, text=True, env={"CHROMIUM": "/bin/sh"}, timeout=60, check=False
    )
    assert (present.returncode, present.stdout) == (0, "")
