"""One display rule: what a host says reaches the operator's terminal escaped, never obeyed.

A real loopback sshd host whose runs, loop and seat carry terminal escape sequences (an OSC 52
clipboard write, a clear-screen, a full reset), Rich markup (a valid tag and one that makes
Rich raise) and a folder name that is not UTF-8. Every listing runs as a real subprocess under
a strict UTF-8 encoder and again under `LANG=C`; the dashboard runs over the same host.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetdeck.backend.fleet.config import load_fleet
from fleetdeck.tui.app import FleetdeckApp
from fleetdeck.tui.views.run_log import LOG_REST_S
from fleetdeck.tui.widgets.keyed_table import KeyedTable

from support.seats import LISTENER
from support.sshfleet import SshdFleet, free_port, have_sshd

pytestmark = pytest.mark.sshd

OSC52 = "\x1b]52;c;SGVsbG8=\x07"  # writes "Hello" to the operator's clipboard
CLEAR = "\x1b[2J"  # clears the operator's screen
RESET = "\x1bc\x07"  # resets the operator's terminal
NAME_OSC = "run-" + OSC52
NAME_MARKUP = "run-[bold]x[blink]y"  # read as markup, it would vanish into styles
NAME_BYTES = b"run-\xff"  # not UTF-8: `run-\udcff` once decoded
REASON = f"boom {CLEAR} [/oops] [bold red]x[/] loss is nan"
MODEL = "/models/" + OSC52 + "[bold]m[/nope]"
LOG_LINE = f"step 1 {CLEAR}{OSC52} [bold]log[/nope]"
# a dead target (the path does not exist) whose name resets the terminal, and a comment
LOOP = f"while true; do sleep 300; /tmp/fd-nope-{RESET}/job; done # {OSC52} [bold]loop[/nope]"

#: what the operator must see instead (the host library's `shown`)
SEEN_OSC = "\\x1b]52;c;SGVsbG8=\\x07"
SEEN_REASON = "boom \\x1b[2J [/oops] [bold red]x[/] loss is nan"
SEEN_BYTES = "run-\\xff"
SEEN_DEAD = "/tmp/fd-nope-\\x1bc\\x07/job"


class Hostile:
    """The host, its fleet file and the processes started on it."""

    def __init__(self, base: Path) -> None:
        self.fleet = SshdFleet(base / "fleet")
        self.host = self.fleet.add("h1")
        self.file = str(self.fleet.write_fleet(base / "hosts.toml"))
        self.procs: list[subprocess.Popen] = []
        runs = self.host.runs
        self.runs = runs
        failed = runs / NAME_OSC
        (failed / "checkpoints" / "checkpoint-10").mkdir(parents=True)
        (failed / "checkpoints" / "checkpoint-10" / "weights.bin").write_bytes(b"w" * 4096)
        (failed / "progress.jsonl").write_text(
            json.dumps({"step": 10, "max_steps": 100, "loss": 2.5}) + "\n"
        )
        (failed / "run.json").write_text(json.dumps({"state": "failed", "error": REASON}))
        (failed / "train.log").write_text(f"starting\n{LOG_LINE}\n")
        live = runs / NAME_MARKUP
        live.mkdir()
        (live / "progress.jsonl").write_text(
            json.dumps({"step": 3, "max_steps": 100, "loss": 2.9}) + "\n"
        )
        odd = os.fsencode(runs) + b"/" + NAME_BYTES
        os.mkdir(odd)
        with open(odd + b"/run.json", "w") as f:
            json.dump({"state": "failed", "error": "stopped"}, f)
        # a process working in the run makes it `running`; a shell loop; a serving seat
        self.start([sys.executable, "-c", "import time; time.sleep(600)"], cwd=str(live))
        self.loop = self.start(["bash", "-c", LOOP])
        bin_dir = base / "bin"
        bin_dir.mkdir()
        (bin_dir / "vllm").write_text(LISTENER)
        (bin_dir / "vllm").chmod(0o755)
        seat = self.start(
            [str(bin_dir / "vllm"), "serve", MODEL, "--port", str(free_port())],
            stdout=subprocess.PIPE,
        )
        seat.stdout.readline()  # it listens

    def start(self, argv: list[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(argv, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    @property
    def failed_run(self) -> str:
        return str(self.runs / NAME_OSC)

    def stop(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        self.fleet.stop_all()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    if not have_sshd():
        pytest.skip("OpenSSH sshd is not installed (apt-get install openssh-server)")
    h = Hostile(tmp_path_factory.mktemp("hostile"))
    time.sleep(0.5)  # the loop's first sleep, the seat's socket
    yield h
    h.stop()


LOCALES = {"strict": {"PYTHONIOENCODING": "utf-8:strict"}, "C": {"LANG": "C", "LC_ALL": "C"}}


def cli(h: Hostile, locale: str, *args: str) -> tuple[int, str, str]:
    """Run `fleetdeck ARGS` in a subprocess under `locale`; (status, stdout, stderr), after
    checking that no escape byte and no byte that is not UTF-8 came out, and no traceback."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTHONIOENCODING",
            "PYTHONUTF8",
            "LANG",
            "LC_ALL",
            "LC_CTYPE",
            "FORCE_COLOR",
            "COLUMNS",
        )
    }
    env.update(LOCALES[locale], COLUMNS="400")
    p = subprocess.run(
        [sys.executable, "-m", "fleetdeck.cli.main", args[0], "--hosts", h.file, *args[1:]],
        capture_output=True,
        env=env,
        timeout=240,
    )
    out, err = p.stdout.decode("utf-8"), p.stderr.decode("utf-8")  # strict: a raw \xff fails here
    for stream in (out, err):
        assert "Traceback" not in stream, err
        for raw in ("\x1b", "\x07", "\x9b"):
            assert raw not in stream, (args, locale, raw, stream)
    return p.returncode, out, err


@pytest.mark.parametrize("locale", LOCALES)
def test_runs_and_status_show_names_and_reasons_escaped(hostile, locale):
    rc, out, err = cli(hostile, locale, "runs")
    assert rc == 0, err
    for seen in ("run-" + SEEN_OSC, SEEN_REASON, SEEN_BYTES, NAME_MARKUP):
        assert seen in out, (seen, out)
    rc, out, err = cli(hostile, locale, "status")
    assert rc == 0, err
    assert NAME_MARKUP in out and "2 failed" in out, out  # the live run, literally
    # --json keeps every string exact (a byte that is not UTF-8 as its \udcXX escape)
    names = {NAME_OSC, NAME_MARKUP, os.fsdecode(NAME_BYTES)}
    rc, out, err = cli(hostile, locale, "runs", "--json")
    assert rc == 0, err
    runs = {r["name"]: r for r in json.loads(out)["runs"]}
    assert names <= set(runs) and REASON in runs[NAME_OSC]["reason"], sorted(runs)
    rc, out, err = cli(hostile, locale, "status", "--json")
    assert rc == 0, err
    assert names <= {r["name"] for h in json.loads(out)["hosts"] for r in h["runs"]}


@pytest.mark.parametrize("locale", LOCALES)
def test_schedules_seats_alerts_purge_and_audit_show_host_text_escaped(hostile, locale):
    rc, out, err = cli(hostile, locale, "schedules")
    assert rc == 0, err
    assert SEEN_DEAD in out and "[bold]loop[/nope]" in out and SEEN_OSC in out, out
    rc, out, err = cli(hostile, locale, "seats")
    assert rc == 0, err
    assert "/models/" + SEEN_OSC + "[bold]m[/nope]" in out, out
    rc, out, err = cli(hostile, locale, "alerts")
    assert rc == 0, err
    assert "loss-nonfinite" in out and SEEN_REASON in out and "run-" + SEEN_OSC in out, out
    assert "new-stray" in out and SEEN_DEAD in out, out
    # --json keeps every string exact
    rc, out, err = cli(hostile, locale, "schedules", "--json")
    assert rc == 0, err
    loop = [s for s in json.loads(out)["schedules"] if s["pid"] == hostile.loop.pid]
    assert len(loop) == 1 and loop[0]["command"] == LOOP and "dead-target" in loop[0]["reasons"], (
        out
    )
    rc, out, err = cli(hostile, locale, "seats", "--json")
    assert rc == 0, err
    assert MODEL in [s["model"] for s in json.loads(out)["seats"]], out
    rc, out, err = cli(hostile, locale, "alerts", "--json")
    assert rc == 0, err
    # the subject exact (it names the run); the sentence made safe once, as every sink gets it
    assert any(
        SEEN_REASON in a["text"] and a["subject"] == hostile.failed_run
        for a in json.loads(out)["alerts"]
    ), out
    ckpt = f"{hostile.failed_run}/checkpoints/checkpoint-10"
    rc, out, err = cli(hostile, locale, "purge", "h1", ckpt, "--dry-run")
    assert rc in (0, 1), err
    assert f"run-{SEEN_OSC}/checkpoints/checkpoint-10" in out + err, out + err
    rc, out, err = cli(
        hostile,
        locale,
        "mirror",
        f"h1:{hostile.failed_run}",
        "h1:/tmp/fd-hostile-mirror",
        "--dry-run",
    )
    assert rc in (0, 1), err
    assert f"run-{SEEN_OSC}" in out + err, out + err
    rc, out, err = cli(hostile, locale, "audit")
    assert rc == 0, err
    assert f"run-{SEEN_OSC}/checkpoints" in out, out
    rc, out, err = cli(hostile, locale, "audit", "--details")
    assert rc == 0, err
    assert f"run-{SEEN_OSC}/checkpoints/checkpoint-10" in out, out
    rc, out, _ = cli(hostile, locale, "audit", "--json")
    paths = [p.get("path") for e in json.loads(out)["entries"] for p in e.get("paths") or ()]
    assert ckpt in paths, paths


# -- the dashboard ----------------------------------------------------------------------------
def screen_text(app) -> str:
    """Every character the screen shows now (the text of its rendered lines)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def assert_clean(text: str) -> None:
    for raw in ("\x1b", "\x07", "\x9b"):
        assert raw not in text, (raw, text)
    assert not any(0xD800 <= ord(c) <= 0xDFFF for c in text), text


async def poll(app, pilot) -> None:
    app.poll_fleet()
    await app.workers.wait_for_complete()
    await pilot.pause()


async def test_dashboard_views_panes_and_toasts_show_host_text_escaped(hostile):
    app = FleetdeckApp(load_fleet(hostile.file), autopoll=False)
    async with app.run_test(size=(200, 50), notifications=True) as pilot:
        await poll(app, pilot)
        assert_clean(screen_text(app))
        assert NAME_MARKUP in screen_text(app)  # the Fleet view's live run, literally

        await pilot.press("2")
        await pilot.pause()
        runs = app.screen.query_one("#runs-table", KeyedTable)
        runs.move_cursor(row=runs.get_row_index(f"h1:{hostile.failed_run}"))
        await pilot.pause(
            LOG_REST_S * 4
        )  # the live run is listed first: its log is read once the cursor rests
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = screen_text(app)
        assert_clean(text)
        assert "run-" + SEEN_OSC in text and NAME_MARKUP in text and SEEN_BYTES in text, text
        assert f"why failed: {SEEN_REASON}" in text, text  # the run pane
        assert "step 1 \\x1b[2J" + SEEN_OSC + " [bold]log[/nope]" in text, text  # its train.log
        await pilot.press("m")  # no adapter to mirror: a toast naming the run
        await pilot.pause()
        text = screen_text(app)
        assert_clean(text)
        assert f"run-{SEEN_OSC} has no final adapter" in text, text

        await pilot.press("3")
        await pilot.pause()
        sched = app.screen.query_one("#sched-table", KeyedTable)
        loop = next(k for k in sched.keys if "fd-nope" in sched.get_cell(k, "cmd").plain)
        sched.move_cursor(row=sched.get_row_index(loop))
        await pilot.pause()
        text = screen_text(app)
        assert_clean(text)
        assert f"stray: names {SEEN_DEAD}, which does not exist on h1" in text, text  # the why pane
        assert "[bold]loop[/nope]" in text, text

        await pilot.press("1")
        await pilot.press("enter")  # the Host view of h1
        await pilot.pause()
        text = screen_text(app)
        assert_clean(text)
        assert SEEN_DEAD in text and "run-" + SEEN_OSC in text, text


async def test_a_modal_shows_a_hostile_path_escaped_and_prefills_no_escape(hostile):
    from fleetdeck.tui.modals.mirror import MirrorModal
    from fleetdeck.tui.modals.purge import PurgeModal

    app = FleetdeckApp(load_fleet(hostile.file), autopoll=False)
    async with app.run_test(size=(200, 50), notifications=True) as pilot:
        await poll(app, pilot)
        ckpt = f"{hostile.failed_run}/checkpoints/checkpoint-10"
        app.push_screen(PurgeModal("h1", [ckpt]))
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = screen_text(app)
        assert_clean(text)
        assert f"run-{SEEN_OSC}/checkpoints/checkpoint-10" in text, text
        await pilot.press("escape")
        app.push_screen(MirrorModal("h1", f"{hostile.failed_run}/adapter"))
        await pilot.pause()
        text = screen_text(app)
        assert_clean(text)
        assert f"run-{SEEN_OSC}/adapter" in text, text


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_real_terminal_receives_no_escape_from_the_host(hostile, tmp_path):
    """The dashboard in a real terminal (tmux): the host's escapes are on screen as text and
    the terminal's own title and clipboard were not touched."""
    sock = str(tmp_path / "tmux.sock")
    env = {**os.environ, "TERM": "xterm-256color"}
    cmd = f"{sys.executable} -m fleetdeck.cli.main tui --hosts {hostile.file}"
    subprocess.run(
        ["tmux", "-S", sock, "new-session", "-d", "-s", "fd", "-x", "200", "-y", "50", cmd],
        check=True,
        env=env,
    )
    try:

        def capture() -> str:
            return subprocess.run(
                ["tmux", "-S", sock, "capture-pane", "-p", "-t", "fd"],
                capture_output=True,
                text=True,
                errors="replace",
                check=True,
            ).stdout

        deadline = time.monotonic() + 60
        while NAME_MARKUP not in capture() and time.monotonic() < deadline:
            time.sleep(0.5)
        # a raw sequence would have been taken by the terminal and left no text behind
        for key, seen in (("2", "run-" + SEEN_OSC), ("3", SEEN_DEAD)):
            subprocess.run(["tmux", "-S", sock, "send-keys", "-t", "fd", key], check=True)
            deadline = time.monotonic() + 20
            while seen not in capture() and time.monotonic() < deadline:
                time.sleep(0.3)
            assert seen in capture(), capture()
        subprocess.run(
            ["tmux", "-S", sock, "resize-window", "-t", "fd", "-x", "80", "-y", "24"], check=True
        )
        time.sleep(1.5)
        assert "fd-nope-\\x1bc" in capture(), capture()
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True)
