"""Script agents for the run tests, and a bench that sets a repository up for them.

The agent is one small Python program written into the test's sandbox.  Its
options say what it does, always in the same order (see ``AGENT_SOURCE``):
record its environment and pid, trap SIGTERM, print lines, count itself in a
shared counter, wait for a flag file, leave a grandchild behind, hang, write
files and commit them in its worktree, move ``main`` in the main checkout,
and exit with a chosen code.  The same program serves as a
``command`` stage (``--fail-unless``).  It runs under the venv's interpreter
(absolute path), so the tests need nothing but git and the venv.

``Bench`` holds the sandbox, the repository and the agent, writes
``sloop.toml`` and tickets and commits them, and wraps the operator client
with the polling the tests share (``wait_run``: ``show`` until terminal).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from tests.support.daemon import Client, DaemonProcess, git, new_daemon, wait_until
from tests.support.gitrepo import git as git_as_tester

STORE_FILE = "store.sqlite3"
# Set on every bench's daemon and passed through to its children (agent.env), so a
# test finds the processes of its own runs, whatever sandbox they run in.
BENCH_VAR = "TEST_BENCH_ROOT"
WAIT_FOR_LIMIT_S = 60.0  # an agent waiting on a flag gives up after this long (exit 97)
RUN_TIMEOUT_S = 45.0
STOP_TIMEOUT_S = 15.0  # a daemon stops its runs within the 5 s kill grace; this is ample

AGENT_SOURCE = r'''
"""A script agent: does what its options say, in a fixed order."""
import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import time

IDENTITY = ["-c", "user.name=agent", "-c", "user.email=agent@example.invalid"]


def fill(text):
    return (
        text.replace("{ticket}", os.environ.get("SLOOP_TICKET", "?"))
        .replace("{run}", os.environ.get("SLOOP_RUN", "?"))
        .replace("{stage}", os.environ.get("SLOOP_STAGE", "?"))
        .replace("{attempt}", os.environ.get("SLOOP_ATTEMPT", "?"))
    )


def counter(path, delta):
    """Count agents alive at once under an flock; remember the maximum."""
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path) as f:
                state = json.load(f)
        except (OSError, ValueError):
            state = {"now": 0, "max": 0, "barrier_timeouts": 0}
        state["now"] += delta
        state["max"] = max(state["max"], state["now"])
        with open(path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(path + ".tmp", path)
        return state


def wait_for(path, limit):
    deadline = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            print(f"gave up waiting for {path}", file=sys.stderr, flush=True)
            sys.exit(97)
        time.sleep(0.02)


def git(*args, cwd="."):
    subprocess.run(["git", *IDENTITY, *args], cwd=cwd, check=True, capture_output=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--env-dump")
    p.add_argument("--pidfile")
    p.add_argument("--trap-term")
    p.add_argument("--say", action="append", default=[])
    p.add_argument("--concurrency")
    p.add_argument("--wait-for")
    p.add_argument("--hang", action="store_true")
    p.add_argument("--hang-run")
    p.add_argument("--grandchild")
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--write", action="append", default=[])
    p.add_argument("--commit-main-once")
    p.add_argument("--fail-unless")
    p.add_argument("--exit", type=int, default=0)
    p.add_argument("--exit-run", action="append", default=[])
    p.add_argument("--wait-limit", type=float, default=60.0)
    opts, rest = p.parse_known_args()
    run = os.environ.get("SLOOP_RUN")
    if opts.pidfile and "AGENT_PID_TAG" not in os.environ:
        # In its sandbox an agent's pid is its namespace's; the test finds the host pid
        # by this tag in /proc/<pid>/environ (read_pid), so put it there: exec again.
        tag = os.urandom(8).hex()
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "AGENT_PID_TAG": tag})

    if opts.env_dump:
        dump = {k: v for k, v in os.environ.items() if k.startswith("SLOOP_")}
        dump["cwd"] = os.getcwd()
        dump["argv_rest"] = rest
        dump["pgid"] = os.getpgid(0)
        dump["pid"] = os.getpid()
        with open(fill(opts.env_dump), "w") as f:
            json.dump(dump, f)
    if opts.pidfile:
        with open(fill(opts.pidfile) + ".tmp", "w") as f:
            f.write("tag:" + os.environ["AGENT_PID_TAG"])
        os.replace(fill(opts.pidfile) + ".tmp", fill(opts.pidfile))
    if opts.trap_term:
        def on_term(signum, frame):
            with open(fill(opts.trap_term), "a") as f:
                f.write("TERM\n")
        signal.signal(signal.SIGTERM, on_term)
    for line in opts.say:
        print(fill(line), flush=True)
    if opts.concurrency:
        counter(opts.concurrency, +1)
    if opts.wait_for:
        wait_for(fill(opts.wait_for), opts.wait_limit)
    if opts.grandchild:
        tag = os.urandom(8).hex()
        env = {**os.environ, "AGENT_PID_TAG": tag}
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], env=env)
        with open(fill(opts.grandchild), "w") as f:
            f.write("tag:" + tag)
    if opts.hang or (opts.hang_run and opts.hang_run == run):
        while True:
            time.sleep(0.2)
    if opts.sleep:
        time.sleep(opts.sleep)
    if opts.write:
        for spec in opts.write:
            name, _, text = spec.partition("=")
            name = fill(name)
            os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
            with open(name, "w") as f:
                f.write(fill(text) + "\n")
        git("add", "-A")
        git("commit", "-q", "-m", fill("agent {run} {stage}#{attempt}"))
    if opts.commit_main_once:
        repo = opts.commit_main_once
        name = fill("moved-by-{run}.txt")
        if not os.path.exists(os.path.join(repo, name)):
            with open(os.path.join(repo, name), "w") as f:
                f.write("main moved\n")
            git("add", name, cwd=repo)
            git("commit", "-q", "-m", fill("main moved during {run}"), cwd=repo)
            print(f"committed {name} on main", flush=True)
    if opts.concurrency:
        counter(opts.concurrency, -1)
    if opts.fail_unless and not os.path.exists(opts.fail_unless):
        print(f"{opts.fail_unless} is missing", file=sys.stderr, flush=True)
        sys.exit(1)
    for spec in opts.exit_run:
        which, _, code = spec.partition(":")
        if which == run:
            sys.exit(int(code))
    sys.exit(opts.exit)


main()
'''


# --- sloop.toml ------------------------------------------------------------------


def toml_value(value: Any) -> str:
    """A TOML value for the few types sloop.toml uses (JSON strings are TOML strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Sequence):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def sloop_toml(
    agent: Sequence[str],
    *,
    parallel: int | None = None,
    flows: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    extra: str = "",
    sandbox: str | None = None,
) -> str:
    """A sloop.toml: ``sandbox`` (when given), ``[repo]`` (when ``parallel``), ``[agent]``,
    and the given flows."""
    lines: list[str] = [f"sandbox = {toml_value(sandbox)}", ""] if sandbox else []
    if parallel is not None:
        lines += ["[repo]", f"parallel = {parallel}", ""]
    lines += ["[agent]", f"command = {toml_value(list(agent))}", ""]
    for name, stages in (flows or {}).items():
        for stage in stages:
            lines.append(f"[[flows.{name}.stages]]")
            lines += [f"{key} = {toml_value(value)}" for key, value in stage.items()]
            lines.append("")
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"


def agent_key(config: str, key: str, value: Any) -> str:
    """``config`` (a sloop_toml text) with one more ``[agent]`` key."""
    assert "[agent]\n" in config, config
    return config.replace("[agent]\n", f"[agent]\n{key} = {toml_value(value)}\n", 1)


# Random SIGKILLs from outside are the chaos tests' weather, not a stage that crashes the
# daemon: a run they cut short again and again is continued, not failed by the bound
# (agent.max_interruptions, which tests/integration/test_continue_runs.py checks).
CHAOS_INTERRUPTIONS = 1000


def ticket_text(title: str, body: str = "", **front: str | int) -> str:
    lines: list[str] = []
    if front:
        lines.append("+++")
        lines += [f"{key} = {toml_value(value)}" for key, value in front.items()]
        lines.append("+++")
    lines.append(f"# {title}")
    if body:
        lines += ["", body]
    return "\n".join(lines) + "\n"


def write_repo_files(
    repo: Path,
    config: str | None,
    tickets: Mapping[str, str],
    *,
    commit: bool = True,
    commit_config: bool = True,
) -> None:
    """Write sloop.toml and ``tickets/<name>.md``; commit them on main (sloop.toml optionally)."""
    if config is not None:
        (repo / "sloop.toml").write_text(config, encoding="utf-8")
    folder = repo / "tickets"
    folder.mkdir(exist_ok=True)
    for name, text in tickets.items():
        (folder / f"{name}.md").write_text(text, encoding="utf-8")
    if not commit:
        return
    if tickets:
        git(repo, "add", "tickets")
    if config is not None and commit_config:
        git(repo, "add", "sloop.toml")
    if git(repo, "diff", "--cached", "--name-only"):
        git(repo, "commit", "-q", "-m", "sloop setup")


# --- processes -------------------------------------------------------------------


def environ_of(pid: int) -> list[bytes] | None:
    """A live process's environment entries; None when gone or a zombie (empty environ)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data.split(b"\0") if data else None


def alive_with(pid: int, *entries: str) -> bool:
    """Whether ``pid`` is a live process whose environment holds every ``entries`` item."""
    env = environ_of(pid)
    return env is not None and all(e.encode() in env for e in entries)


def processes_with(*entries: str) -> list[int]:
    """Live processes of ours whose environment holds every ``entries`` item."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid() and alive_with(int(name), *entries):
            found.append(int(name))
    return found


# --- the bench -------------------------------------------------------------------


@dataclass
class Bench:
    """A sandbox with a repository, the script agent, and (once started) a daemon."""

    root: Path
    repo: Path
    agent_path: Path
    daemon: DaemonProcess | None = None
    _client: Client | None = None
    env: dict[str, str] = field(default_factory=dict)
    # The daemon's command prefix (tests.support.unprivileged: run it as another user).
    prefix: list[str] = field(default_factory=list)

    @classmethod
    def create(cls, root: Path, repo: Path) -> Bench:
        agents = root / "agents"
        agents.mkdir(exist_ok=True)
        agent = agents / "agent.py"
        agent.write_text(AGENT_SOURCE, encoding="utf-8")
        (root / "flags").mkdir(exist_ok=True)
        return cls(root=root, repo=repo, agent_path=agent)

    # -- files ------------------------------------------------------------------

    def argv(self, *options: str) -> list[str]:
        """The agent's argv (absolute interpreter and script) with ``options``."""
        return [sys.executable, str(self.agent_path), *options]

    def path(self, name: str) -> Path:
        """A file in the sandbox's flags folder (outside every worktree)."""
        return self.root / "flags" / name

    def flag(self, name: str) -> str:
        return str(self.path(name))

    def release(self, name: str) -> None:
        self.path(name).write_text("go\n")

    def setup(
        self,
        config: str | None,
        tickets: Mapping[str, str] | None = None,
        *,
        commit_config: bool = True,
    ) -> None:
        config = None if config is None else self.sharing_flags(config)
        write_repo_files(self.repo, config, tickets or {}, commit_config=commit_config)

    def write_config(self, config: str) -> None:
        (self.repo / "sloop.toml").write_text(self.sharing_flags(config), encoding="utf-8")

    def sharing_flags(self, config: str) -> str:
        """The flags folder read-write in every sandbox: the tests' results folder.

        Agents report to the test through files there, as a CI harness collects
        results through a folder it mounts on purpose (``agent.rw_mounts``).
        """
        if "rw_mounts" in config:
            return config
        line = f"rw_mounts = {toml_value([str(self.root / 'flags')])}\nenv = [{BENCH_VAR!r}]"
        if "[agent]\n" in config:
            return config.replace("[agent]\n", f"[agent]\n{line}\n", 1)
        return config.rstrip("\n") + f"\n\n[agent]\n{line}\n"

    def commit_on_main(self, files: Mapping[str, str], message: str = "main moves") -> str:
        for name, text in files.items():
            (self.repo / name).write_text(text, encoding="utf-8")
        git_as_tester(self.repo, "add", *files)
        git_as_tester(self.repo, "commit", "-q", "-m", message)
        return git_as_tester(self.repo, "rev-parse", "HEAD")

    def rev(self, rev: str) -> str:
        return git(self.repo, "rev-parse", rev)

    # -- the daemon ---------------------------------------------------------------

    def start(self) -> Bench:
        """Start a daemon on the sandbox's directories (again, after ``kill9``)."""
        if self.daemon is not None:
            for old in self.daemon.clients:
                old.close()
            self.daemon.clients.clear()
        env = {"PYTHONFAULTHANDLER": "1", BENCH_VAR: str(self.root), **self.env}
        daemon = new_daemon(self.root, self.repo, **env)
        daemon.prefix = self.prefix
        self.daemon = daemon.start()
        self._client = self.daemon.client()
        return self

    @property
    def client(self) -> Client:
        assert self._client is not None, "start the daemon first"
        return self._client

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def run_env(self, run_id: str) -> tuple[str, str]:
        """Environment entries only the processes of this bench's run ``run_id`` carry."""
        return f"SLOOP_RUN={run_id}", f"{BENCH_VAR}={self.root}"

    def worktree_of(self, run_id: str) -> Path:
        return self.state_dir / "checkouts" / run_id

    def stop(self) -> int:
        """SIGTERM the daemon and wait for its exit code.

        A daemon still running after ``STOP_TIMEOUT_S`` gets SIGABRT: with
        ``PYTHONFAULTHANDLER`` set (``start`` sets it) it writes every thread's
        stack into its log first, which says where the shutdown hung.  Then
        the exit code is the signal's (negative).
        """
        daemon = self.daemon
        self._client = None
        if daemon is None or daemon.proc is None:
            return 0
        for client in daemon.clients:
            client.close()
        daemon.clients.clear()
        proc = daemon.proc
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            try:
                code = proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        return code

    def log(self) -> str:
        return self.daemon.log() if self.daemon is not None else ""

    # -- verbs --------------------------------------------------------------------

    def ok(self, verb: str, args: dict[str, Any] | None = None) -> Any:
        return self.client.ok(verb, args)

    def post(self, name: str, **args: Any) -> dict[str, Any]:
        data: dict[str, Any] = self.ok("post", {"path": f"tickets/{name}.md", **args})
        return data

    def show_run(self, ref: str) -> dict[str, Any] | None:
        """A run's detail, or None while ``ref`` names no run yet."""
        response = self.client.call("show", {"ref": ref})
        if not response["ok"] or response["data"]["kind"] != "run":
            return None
        value: dict[str, Any] = response["data"]["value"]
        return value

    def ticket(self, ref: str) -> dict[str, Any]:
        data = self.ok("show", {"ref": ref})
        assert data["kind"] == "ticket", data
        value: dict[str, Any] = data["value"]
        return value

    def dashboard(self) -> dict[str, Any]:
        data: dict[str, Any] = self.ok("show")
        assert data["kind"] == "dashboard", data
        return data

    def wait_run(self, ref: str, timeout: float = RUN_TIMEOUT_S) -> dict[str, Any]:
        """Poll ``show <run>`` until the run is terminal; its detail.

        A merged run is waited for until its worktree is gone too: the daemon
        reports ``merged`` first and removes the worktree afterwards, and only
        then is its driver done (it pokes the scheduler last).  Waiting for
        that keeps the driver's last steps out of whatever the test does next.
        """

        def settled() -> dict[str, Any] | None:
            value = self.show_run(ref)
            if value is None or not value["terminal"]:
                return None
            return value if value["state"] != "merged" or value["worktree"] is None else None

        try:
            value: dict[str, Any] = wait_until(settled, timeout=timeout, interval=0.05)
        except AssertionError:
            raise AssertionError(
                f"{ref} did not settle: {self.show_run(ref)}\n--- daemon log ---\n{self.log()}"
            ) from None
        return value

    def wait_stage_running(self, ref: str, stage: str, timeout: float = 20.0) -> dict[str, Any]:
        """Poll ``show <run>`` until ``stage`` has a running execution; the run's detail."""

        def running() -> dict[str, Any] | None:
            value = self.show_run(ref)
            if value is None:
                return None
            assert not value["terminal"], value
            rows = [r for r in value["stages"] if r["stage"] == stage and r["state"] == "running"]
            return value if rows else None

        result: dict[str, Any] = wait_until(running, timeout=timeout, interval=0.05)
        return result

    def event_kinds(self, run_id: str) -> list[str]:
        """The kinds of the run's events, in feed order (``events`` scoped to the run)."""
        kinds: list[str] = []
        args: dict[str, Any] = {"scope": run_id}
        while True:
            page = self.ok("events", args)
            if not page["events"]:
                return kinds
            assert all(e["run"] == run_id for e in page["events"]), page
            kinds += [e["kind"] for e in page["events"]]
            args = {"scope": run_id, "after": page["next_cursor"]}

    def log_lines(self, run_id: str) -> list[tuple[str | None, int | None, str, str]]:
        """(stage, attempt, stream, text) of every record of a run's output (``logs``)."""
        records: list[dict[str, Any]] = []
        args: dict[str, Any] = {"run": run_id}
        while True:
            page = self.ok("logs", args)
            records += page["records"]
            if page["complete"]:
                break
            args = {"run": run_id, "after": page["next_cursor"]}
        return [(r.get("stage"), r.get("attempt"), r["stream"], r["text"]) for r in records]

    @contextmanager
    def store(self) -> Iterator[apsw.Connection]:
        """The test's own connection on the store (the daemon may be running: WAL)."""
        conn = apsw.Connection(str(self.state_dir / STORE_FILE))
        conn.setbusytimeout(5000)
        try:
            yield conn
        finally:
            conn.close()


def stage_table(value: dict[str, Any]) -> list[tuple[str, int, str]]:
    """A run's (or run summary's) stage rows as (stage, attempt, state)."""
    return [(row["stage"], row["attempt"], row["state"]) for row in value["stages"]]


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def read_pid(path: Path) -> int:
    """The host pid an agent wrote: a pid, or a tag in its environment (sandboxed agents
    see their namespace's pids only)."""
    # Generous: a stage on a Ray node is placed and its checkout made before it starts.
    text = str(wait_until(lambda: path.exists() and path.read_text().strip(), timeout=30.0))
    if not text.startswith("tag:"):
        return int(text)
    # Until a child it forks has exec'd, that child shows the agent's environment (and
    # so its tag) too: wait for the one process that keeps it.
    found: list[int] = wait_until(lambda: _the_one(tagged(path)))
    return found[0]


def _the_one(pids: list[int]) -> list[int] | None:
    return pids if len(pids) == 1 else None


def tagged(path: Path) -> list[int]:
    """The live processes carrying the tag an agent wrote to ``path`` (see read_pid)."""
    text = path.read_text().strip()
    return processes_with(f"AGENT_PID_TAG={text.removeprefix('tag:')}")


def kill_leftovers(state_dir: Path) -> list[int]:
    """After a test: SIGKILL whatever still runs in one of this sandbox's worktrees.

    Only a failing test leaves such processes (the daemon stops its groups);
    this keeps one failure from leaking sleeping agents into the next test.
    """
    bench = f"{BENCH_VAR}={state_dir.parent}".encode()
    killed = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        env = environ_of(int(name))
        if env is not None and bench in env and any(e.startswith(b"SLOOP_RUN=") for e in env):
            with suppress(OSError):
                os.kill(int(name), 9)
                killed.append(int(name))
    return killed


# --- the probing agent (worker sockets and panels) --------------------------------

PROBE_SOURCE = r'''
"""A probing agent: runs the steps of its plan (a JSON argument), recording every answer.

Each step is an object with "do" (see STEPS); strings in the plan may hold
{run}, {ticket}, {stage} and {attempt}.  The answers go to the plan's "out"
file as one JSON object (key -> answer), rewritten after every step, so a
test can read what the probe saw even if it stopped early.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time

GRANDCHILD = r"""
import json, os, socket, sys
path, out = sys.argv[1], sys.argv[2]
seen = {"env": sorted(os.environ), "pid": os.getpid(), "ppid": os.getppid(),
        "sid": os.getsid(0)}
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    s.sendall(json.dumps({"v": 1, "id": "g", "verb": "show", "args": {},
                          "token": None}).encode() + b"\n")
    seen["answer"] = json.loads(s.makefile("rb").readline())
except OSError as exc:
    seen["error"] = repr(exc)
with open(out + ".tmp", "w") as f:
    json.dump(seen, f)
os.replace(out + ".tmp", out)
"""


def fill(value):
    if isinstance(value, str):
        for key in ("run", "ticket", "stage", "attempt"):
            value = value.replace("{" + key + "}", os.environ.get("SLOOP_" + key.upper(), "?"))
        return value
    if isinstance(value, list):
        return [fill(v) for v in value]
    if isinstance(value, dict):
        return {k: fill(v) for k, v in value.items()}
    return value


def write_atomic(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def wait_file(path, limit=40.0):
    deadline = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            print(f"gave up waiting for {path}", file=sys.stderr, flush=True)
            sys.exit(97)
        time.sleep(0.02)


def other_in(folder, count):
    """The content of the file in ``folder`` not named after this run (once ``count`` exist)."""
    deadline = time.monotonic() + 40.0
    while True:
        found = os.listdir(folder) if os.path.isdir(folder) else []
        names = sorted(n for n in found if not n.endswith(".tmp"))
        if len(names) >= count:
            break
        if time.monotonic() > deadline:
            sys.exit(97)
        time.sleep(0.02)
    other = [n for n in names if n != os.environ.get("SLOOP_RUN")][0]
    with open(os.path.join(folder, other)) as f:
        return f.read().strip()


def resolve(spec, own):
    """own | null | file:<path> | other:<folder> | lit:<text>"""
    if spec == "own":
        return os.environ.get(own)
    if spec is None:
        return None
    kind, _, rest = spec.partition(":")
    if kind == "file":
        wait_file(rest)
        with open(rest) as f:
            return f.read().strip()
    if kind == "other":
        return other_in(rest, 2)
    return rest


def request(path, message):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(15)
        s.connect(path)
        with s:
            s.sendall(json.dumps(message).encode() + b"\n")
            line = s.makefile("rb").readline()
    except OSError as exc:
        return {"connect_error": exc.__class__.__name__}
    return json.loads(line) if line else {"closed": True}


def step_req(step):
    message = {"v": 1, "id": step["key"], "verb": step["verb"], "args": step.get("args", {})}
    if not step.get("omit_token"):
        message["token"] = resolve(step.get("token", "own"), "SLOOP_TOKEN")
    return request(resolve(step.get("socket", "own"), "SLOOP_SOCKET"), message)


def step_ctl(step):
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    done = subprocess.run(
        [sys.executable, "-m", "sloopctl", "--json", *step["argv"]],
        capture_output=True, text=True, env=env, timeout=30,
    )
    seen = {"rc": done.returncode, "stderr": done.stderr}
    try:
        seen["json"] = json.loads(done.stdout)
    except ValueError:
        seen["stdout"] = done.stdout
    return seen


def step_env(step):
    path = os.environ.get("SLOOP_SOCKET", "")
    seen = {k: v for k, v in os.environ.items() if k.startswith("SLOOP_")}
    seen["pid"], seen["ppid"] = os.getpid(), os.getppid()
    try:
        st = os.stat(path)
        seen["socket_mode"] = oct(st.st_mode & 0o777)
        seen["socket_is_socket"] = (st.st_mode & 0o170000) == 0o140000
    except OSError:
        seen["socket_mode"] = None
    return seen


def step_grandchild(step):
    """Double fork, setsid, env -i: an orphan the daemon adopts, with no marker."""
    path = resolve(step["socket"], "SLOOP_SOCKET")
    out = step["out"]
    env_tool = shutil.which("env")
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            middle = os.getpid()
            if os.fork() != 0:
                os._exit(0)
            deadline = time.monotonic() + 10
            while os.getppid() == middle and time.monotonic() < deadline:
                time.sleep(0.01)  # until the subreaper adopted us
            os.execv(env_tool, ["env", "-i", sys.executable, "-c", GRANDCHILD, path, out])
        finally:
            os._exit(127)
    os.waitpid(pid, 0)
    wait_file(out)
    with open(out) as f:
        return json.load(f)


def step_race(step):
    """Connect from a child that is gone (reaped) before the daemon looks at the peer.

    The probe first keeps the daemon busy (``busy`` pipelined ``show`` requests
    on its own worker socket), then forks: the child connects the target socket
    and exits at once, the probe reaps it and then talks on that connection.
    Stops at the first answer that is not an error.
    """
    path = resolve(step["socket"], "SLOOP_SOCKET")
    message = json.dumps({"v": 1, "id": "race", "verb": "show", "args": {}}).encode() + b"\n"
    filler = json.dumps(
        {"v": 1, "id": "busy", "verb": "show", "args": {}, "token": os.environ["SLOOP_TOKEN"]}
    ).encode() + b"\n"
    counts, admitted = {}, None
    for _ in range(step["tries"]):
        busy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        busy.connect(os.environ["SLOOP_SOCKET"])
        busy.sendall(filler * step.get("busy", 0))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            try:
                s.connect(path)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        s.settimeout(15)
        try:
            s.sendall(message)
            reader = s.makefile("rb")
            line = reader.readline()
            reader.close()
        except OSError:
            line = b""
        s.close()
        drain = busy.makefile("rb")
        for _ in range(step.get("busy", 0)):
            drain.readline()
        drain.close()
        busy.close()
        reply = json.loads(line) if line else {}
        key = (reply.get("error") or {}).get("code") or (reply.get("data") or {}).get("kind")
        counts[str(key)] = counts.get(str(key), 0) + 1
        if reply.get("ok") and admitted is None:
            admitted = reply
        if admitted is not None and step.get("stop", True):
            break
    return {"counts": counts, "admitted": admitted}


def step_save(step):
    value = {"token": os.environ.get("SLOOP_TOKEN", ""),
             "socket": os.environ.get("SLOOP_SOCKET", "")}[step["what"]]
    write_atomic(step["path"], value)
    return value


def step_wait(step):
    """Until ``path`` exists, or until ``dir`` holds ``count`` files."""
    if "dir" in step:
        other_in(step["dir"], step["count"])
    else:
        wait_file(step["path"])
    return True


def step_touch(step):
    write_atomic(step["path"], "go\n")
    return True


def step_stamp(step):
    return time.time()


def step_sleep(step):
    time.sleep(step["seconds"])
    return True


STEPS = {
    "req": step_req,
    "ctl": step_ctl,
    "env": step_env,
    "grandchild": step_grandchild,
    "race": step_race,
    "save": step_save,
    "wait": step_wait,
    "touch": step_touch,
    "sleep": step_sleep,
    "stamp": step_stamp,
}


def main():
    plan = fill(json.loads(sys.argv[1]))
    out = plan["out"]
    seen = {}
    for number, step in enumerate(plan["steps"]):
        key = step.get("key", f"{number}-{step['do']}")
        seen[key] = STEPS[step["do"]](step)
        write_atomic(out, json.dumps(seen))
    sys.exit(plan.get("exit", 0))


main()
'''


def install_probe(bench: Bench) -> Path:
    """Write the probing agent into the sandbox (next to the script agent)."""
    path = bench.agent_path.parent / "probe.py"
    path.write_text(PROBE_SOURCE, encoding="utf-8")
    return path


def probe_argv(
    bench: Bench, out: str, steps: Sequence[Mapping[str, Any]], exit_code: int = 0
) -> list[str]:
    """The argv of a probing agent that runs ``steps`` and records the answers in ``out``."""
    plan = {"out": out, "steps": list(steps), "exit": exit_code}
    return [sys.executable, str(bench.agent_path.parent / "probe.py"), json.dumps(plan)]


def start_with_args(bench: Bench, *args: str) -> Bench:
    """``Bench.start`` with extra ``sloopd serve`` arguments (``--metrics HOST:PORT``)."""
    from tests.support.daemon import ArgsDaemon

    if bench.daemon is not None:
        for old in bench.daemon.clients:
            old.close()
        bench.daemon.clients.clear()
    bench.daemon = ArgsDaemon(
        repo=bench.repo,
        state_dir=bench.state_dir,
        socket_dir=bench.root / "s",
        extra_env=dict(bench.env),
        extra_args=args,
    ).start()
    bench._client = bench.daemon.client()
    return bench


# --- the printing agent (logs and follow tests) -----------------------------------

PRINTER_SOURCE = r'''
"""A printing agent: writes what its plan (a JSON argument) says, byte for byte.

Steps: {"do": "lines", "stream", "text" (with {n}), "first", "last", "every"}
prints numbered lines; "bytes" writes raw hex; "partial" text without a
newline; "long" one line of "size" x's;
"note" leaves a note through the worker socket; "wait" waits for a file;
"touch" creates one; "sleep".  Text may hold {run}, {ticket}, {stage}, {attempt}.
"""
import json
import os
import socket
import sys
import time


def fill(value):
    for key in ("run", "ticket", "stage", "attempt"):
        value = value.replace("{" + key + "}", os.environ.get("SLOOP_" + key.upper(), "?"))
    return value


def note(text):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(15)
    s.connect(os.environ["SLOOP_SOCKET"])
    message = {"v": 1, "id": "n", "verb": "note", "args": {"text": text},
               "token": os.environ["SLOOP_TOKEN"]}
    s.sendall(json.dumps(message).encode() + b"\n")
    answer = json.loads(s.makefile("rb").readline())
    s.close()
    if not answer.get("ok"):
        print(f"note refused: {answer}", file=sys.stderr, flush=True)
        sys.exit(96)


def wait_for(path, limit=60.0):
    deadline = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            print(f"gave up waiting for {path}", file=sys.stderr, flush=True)
            sys.exit(97)
        time.sleep(0.02)


def main():
    plan = json.loads(sys.argv[1])
    streams = {"stdout": sys.stdout.buffer, "stderr": sys.stderr.buffer}
    for step in plan["steps"]:
        do = step["do"]
        out = streams[step.get("stream", "stdout")]
        if do == "lines":
            for n in range(step["first"], step["last"] + 1):
                out.write(fill(step["text"]).replace("{n}", str(n)).encode() + b"\n")
                out.flush()
                if step.get("every"):
                    time.sleep(step["every"])
        elif do == "bytes":
            out.write(bytes.fromhex(step["hex"]))
            out.flush()
        elif do == "partial":
            out.write(fill(step["text"]).encode())
            out.flush()
        elif do == "long":
            out.write(b"x" * step["size"] + b"\n")
            out.flush()
        elif do == "note":
            note(fill(step["text"]))
        elif do == "wait":
            wait_for(fill(step["path"]))
        elif do == "touch":
            with open(fill(step["path"]), "w") as f:
                f.write("done\n")
        elif do == "sleep":
            time.sleep(step["seconds"])
    sys.exit(plan.get("exit", 0))


main()
'''


def printer_argv(bench: Bench, steps: Sequence[Mapping[str, Any]], exit_code: int = 0) -> list[str]:
    """The argv of a printing agent (written into the sandbox once) that runs ``steps``."""
    path = bench.agent_path.parent / "printer.py"
    if not path.exists():
        path.write_text(PRINTER_SOURCE, encoding="utf-8")
    plan = {"steps": list(steps), "exit": exit_code}
    return [sys.executable, str(path), json.dumps(plan)]
