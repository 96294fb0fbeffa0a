"""``make demo``: a sample repository walked to merged by the bundled example agent.

It builds a fresh repository under /tmp with a sloop.toml and three tickets,
starts ``sloopd serve`` on it, posts the tickets with ``sloopctl``, waits until
every ticket is merged, shows what happened, and stops the daemon.  The
repository is left behind for you to look around in; the commands it runs are
printed as it runs them, so you can repeat them by hand.

Exit status: 0 when every ticket merged, 1 otherwise (the daemon's log is
printed then).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

TIMEOUT_S: Final = 120.0
POLL_S: Final = 0.5
START_TIMEOUT_S: Final = 15.0
STOP_TIMEOUT_S: Final = 15.0
IDENTITY: Final = ("-c", "user.name=sloop-demo", "-c", "user.email=demo@sloop.invalid")
# Variables that would point sloopctl or git somewhere other than the demo.
SCRUBBED_ENV: Final = (
    "SLOOP_OPERATOR_SOCKET",
    "SLOOP_SOCKET_DIR",
    "SLOOP_SOCKET",
    "SLOOP_TOKEN",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
)

RAY_ADDRESS: Final = os.environ.get("RAY_ADDRESS", "")

TICKETS: Final = {
    "greeting.md": """\
# Add a greeting

Greet whoever reads this repository.
""",
    "license-note.md": """\
+++
priority = 1
+++
# Say which license applies

Front matter sets the priority: higher is claimed first.
""",
    "usage.md": """\
# Document how to run the tool

One paragraph is enough.
""",
}


class DemoFailed(Exception):
    """The demo could not finish; the message says where it stopped."""


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


# AGENT=claude|codex|gemini: a real agent CLI against a local stand-in (demo_agents).
AGENT: Final = os.environ.get("AGENT") or "example"
EXTRA_ENV: dict[str, str] = {}


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV} | EXTRA_ENV
    env["NO_COLOR"] = "1"  # the output is read as a transcript
    return env


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *IDENTITY, *args],
        capture_output=True,
        text=True,
        check=False,
        env=environment(),
    )
    if done.returncode != 0:
        raise DemoFailed(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def toml_list(items: Sequence[str]) -> str:
    # A JSON string is a valid TOML basic string.
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"


def make_repository(demo: Path, agent_section: str) -> list[str]:
    """The sample repository; returns the ticket paths, relative to it."""
    (demo / "README.md").write_text("# A sample project\n\nSloop's demo works on this.\n")
    (demo / ".gitignore").write_text(".sloop-state/\n.s/\n")
    (demo / "sloop.toml").write_text(
        f"""\
# The demo's sloop.toml; 'sloopctl init' writes a commented one with every key.
[repo]
main = "main"
tickets = "tickets"
parallel = 2

[agent]
{agent_section}
[[flows.default.stages]]
name = "implement"
action = "agent"
prompt = "Implement the ticket. Commit your work."

[[flows.default.stages]]
name = "sync"
action = "sync"

[[flows.default.stages]]
name = "merge"
action = "ff_only"
return_to = "sync"
returns = 3
"""
    )
    tickets = demo / "tickets"
    tickets.mkdir()
    # A vendor stand-in scripts one change (hello.txt): one ticket is enough.
    chosen = TICKETS if AGENT == "example" else dict(list(TICKETS.items())[:1])
    for name, text in chosen.items():
        (tickets / name).write_text(text)
    git(demo, "init", "--quiet", "--initial-branch=main")
    git(demo, "add", "-A")
    git(demo, "commit", "--quiet", "-m", "A sample project with three tickets")
    return [f"tickets/{name}" for name in sorted(chosen)]


def start_daemon(demo: Path, state: Path, sockets: Path, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "sloopd", "serve", "--repo", str(demo)]
    argv += ["--state-dir", str(state), "--socket-dir", str(sockets)]
    # make demo RAY_ADDRESS=HOST:PORT: every stage on that Ray cluster's nodes
    # (docs/scale-out.md); RAY_AUTH_TOKEN or the token file must be set for it.
    on_ray = ["--executor", "ray", "--ray-address", RAY_ADDRESS] if RAY_ADDRESS else []
    argv += on_ray
    print(f"$ sloopd serve --repo {demo} --state-dir {state} --socket-dir {sockets}", *on_ray)
    print(f"  (its log: {log})", flush=True)
    with log.open("ab") as sink:
        return subprocess.Popen(
            argv,
            cwd=demo,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=sink,
            env=environment(),
        )


def first_line(proc: subprocess.Popen[bytes], timeout: float) -> str | None:
    """The daemon's first stdout line (its socket path): its only handshake."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    buffer = b""
    while b"\n" not in buffer:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        readable, _, _ = select.select([fd], [], [], remaining)
        if readable:
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            buffer += chunk
    return buffer.partition(b"\n")[0].decode(errors="replace").strip() or None


def sloopctl(
    demo: Path, socket: str, *args: str, echo: bool = True, check: bool = True
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "sloopctl", "--socket", socket, *args]
    if echo:
        print(f"$ sloopctl {' '.join(args)}", flush=True)
    done = subprocess.run(
        argv, cwd=demo, capture_output=True, text=True, check=False, env=environment()
    )
    if echo:
        print(done.stdout, end="", flush=True)
        print(done.stderr, end="", file=sys.stderr, flush=True)
    if check and done.returncode != 0:
        raise DemoFailed(f"sloopctl {' '.join(args)} exited {done.returncode}")
    return done


def show_json(demo: Path, socket: str, *ref: str) -> dict[str, Any]:
    done = sloopctl(demo, socket, "--json", "show", *ref, echo=False, check=False)
    try:
        envelope = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise DemoFailed(f"sloopctl show printed no envelope: {done.stderr.strip()}") from None
    if not isinstance(envelope, dict) or envelope.get("ok") is not True:
        raise DemoFailed(f"sloopctl show failed: {done.stdout.strip()}")
    data = envelope["data"]
    assert isinstance(data, dict)
    return data


def progress(dashboard: dict[str, Any]) -> str:
    runs = [f"{r.get('alias')} {r.get('state')}" for r in dashboard.get("runs", [])]
    waiting = [
        f"{t.get('name')} {t.get('state')}"
        for t in dashboard.get("tickets", [])
        if t.get("state") != "running"
    ]
    done = [f"{r.get('alias')} {r.get('state')}" for r in dashboard.get("recent", [])]
    return (
        f"in flight: {', '.join(runs) or '-'} | waiting: {', '.join(waiting) or '-'} | "
        f"finished: {', '.join(done) or '-'}"
    )


def wait_until_settled(
    demo: Path, socket: str, proc: subprocess.Popen[bytes], names: list[str]
) -> dict[str, str]:
    """Poll the dashboard until no ticket is left to run; each ticket's final state."""
    print(f"$ sloopctl --json show   (every {POLL_S:g} s, for up to {TIMEOUT_S:g} s)")
    deadline = time.monotonic() + TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DemoFailed(f"the daemon exited with status {proc.returncode}")
        dashboard = show_json(demo, socket)
        line = progress(dashboard)
        if line != last:
            print(f"  {line}", flush=True)
            last = line
        # The dashboard lists non-terminal tickets only: once it lists none and
        # nothing is in flight, every ticket has settled one way or another.
        if not dashboard.get("tickets") and not dashboard.get("runs"):
            return {name: str(show_json(demo, socket, name)["value"]["state"]) for name in names}
        time.sleep(POLL_S)
    raise DemoFailed(f"not every ticket merged within {TIMEOUT_S:g} s")


def stop_daemon(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print("the daemon did not stop on SIGTERM; killing it", file=sys.stderr)
        proc.kill()
        proc.wait()


def demo_run(demo: Path) -> None:
    state, sockets, log = demo / ".sloop-state", demo / ".s", demo / ".sloop-state" / "daemon.log"
    say(f"a sample repository in {demo}")
    section = EXAMPLE_AGENT if AGENT == "example" else demo_agents().agent_section(AGENT)
    tickets = make_repository(demo, section)
    print(git(demo, "log", "--oneline", "main"), end="")
    print("\n".join(f"  {path}" for path in tickets))

    say("start the daemon (sloopctl daemon does this for you in a real repository)")
    state.mkdir()
    proc = start_daemon(demo, state, sockets, log)
    try:
        socket = first_line(proc, START_TIMEOUT_S)
        if socket is None:
            raise DemoFailed("the daemon did not print its socket path")
        print(f"  operator socket: {socket}", flush=True)

        say("post the tickets: each gets a trigger, due now")
        sloopctl(demo, socket, "post", *tickets)

        say("let the example agent walk them: implement -> sync -> merge")
        names = [Path(path).stem for path in tickets]
        states = wait_until_settled(demo, socket, proc, names)
        failed = {name: s for name, s in states.items() if s != "merged"}

        say("the dashboard")
        sloopctl(demo, socket, "show")
        say("main, advanced by the merge stages")
        print(f"$ git log --oneline main\n{git(demo, 'log', '--oneline', 'main')}", end="")
        say(f"one run in detail: {names[0]}#1")
        sloopctl(demo, socket, "show", f"{names[0]}#1")
        if AGENT != "example":
            say("what it cost")
            print("  " + demo_agents().cost_line(show_json(demo, socket, f"{names[0]}#1")["value"]))
        if failed:
            raise DemoFailed(
                "not every ticket merged: " + ", ".join(f"{n} {s}" for n, s in failed.items())
            )
    except BaseException:
        stop_daemon(proc)
        print(f"\n== the daemon's log ({log})", file=sys.stderr)
        print(log.read_text(errors="replace") if log.exists() else "(none)", file=sys.stderr)
        raise
    say("stop the daemon (SIGTERM)")
    stop_daemon(proc)
    print(f"  stopped with status {proc.returncode}")


def demo_agents() -> Any:
    """The real-CLI half of the demo, imported only when AGENT asks for it."""
    import demo_agents as agents

    return agents


EXAMPLE_AGENT: Final = (
    '# The bundled example agent: writes notes/<ticket>.md and commits it.\npreset = "example"\n'
)


def main() -> int:
    if AGENT not in ("example", "claude", "codex", "gemini"):
        print(f"AGENT must be example, claude, codex or gemini, not {AGENT!r}", file=sys.stderr)
        return 2
    demo = Path(tempfile.mkdtemp(prefix="sloop-demo-", dir="/tmp"))
    try:
        if AGENT == "example":
            demo_run(demo)
        else:
            say(f"agent: the real {AGENT} CLI, against a local stand-in of its vendor's API")
            with demo_agents().stand_in(AGENT) as extra:
                EXTRA_ENV.update(extra)
                demo_run(demo)
    except DemoFailed as exc:
        print(f"\ndemo failed: {exc}", file=sys.stderr)
        print(f"the sample repository is left in {demo}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\ninterrupted; the sample repository is left in {demo}", file=sys.stderr)
        return 130
    say("done")
    print(f"The sample repository is left in {demo} for you to look around:")
    print(f"  cd {demo} && git log --oneline --graph --all")
    print("  rm -rf " + str(demo) + "   # when you are done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
