"""Capture real request/response lines for docs/protocol.md.

Builds a throwaway git repository under /tmp with a sloop.toml of four flows and a
handful of tickets, starts a real ``sloopd serve`` on it, sends every example
request over the real operator socket, and prints each request line and the
response line the daemon wrote, byte for byte.  Worker-socket examples are sent
by a small agent script from inside real runs; it records its own lines to files
this script prints at the end.  Finally it refuses the store (a schema version
above the binary's) to capture the answers of a daemon serving only ``show``.

Usage: make protocol-doc (runs this, then render.py; see the Makefile)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

IDENTITY = ("-c", "user.name=capture", "-c", "user.email=capture@example.invalid")

WORKER_AGENT = r'''
"""A worker-socket agent: sends its mode's requests, records each line pair."""
import json, os, socket, subprocess, sys, time

mode, out_dir = sys.argv[1], sys.argv[2]
env = os.environ
tag = f"{env['SLOOP_RUN']}-{env['SLOOP_STAGE']}-{env['SLOOP_ATTEMPT']}-{mode}"
seen = []

def send(path, line):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(15)
    try:
        s.connect(path)
    except OSError as exc:  # in its sandbox a run sees no socket but its own
        return json.dumps({"connect_error": exc.__class__.__name__})
    s.sendall(line.encode() + b"\n")
    reply = s.makefile("rb").readline().decode().rstrip("\n")
    s.close()
    return reply

def req(label, verb, args=None, token="own", path=None, rid=None):
    message = {"v": 1, "id": rid or f"w{len(seen) + 1}", "verb": verb, "args": args or {}}
    message["token"] = env["SLOOP_TOKEN"] if token == "own" else token
    line = json.dumps(message, separators=(",", ":"))
    seen.append({"label": label, "request": line,
                 "response": send(path or env["SLOOP_SOCKET"], line)})
    with open(os.path.join(out_dir, tag + ".json"), "w") as f:
        json.dump(seen, f)

def commit(name):
    with open(name, "w") as f:
        f.write(f"written by {env['SLOOP_RUN']} ({env['SLOOP_STAGE']}#{env['SLOOP_ATTEMPT']})\n")
    subprocess.run(["git", "-c", "user.name=agent", "-c", "user.email=agent@example.invalid",
                    "add", name], check=True)
    subprocess.run(["git", "-c", "user.name=agent", "-c", "user.email=agent@example.invalid",
                    "commit", "-q", "-m", f"{env['SLOOP_TICKET']}: {name}"], check=True)

if mode == "reported":
    print("worker: starting", flush=True)
    req("brief", "brief")
    req("show (own run, no ref)", "show")
    req("show (own ticket by id)", "show", {"ref": env["SLOOP_TICKET"]})
    req("note", "note", {"text": "work committed; tests pass locally"})
    commit(env["SLOOP_TICKET"] + ".txt")
    req("verdict (stage worker)", "verdict",
        {"verdict": "pass", "reason": "the ticket is done", "confidence": "high"})
    req("verdict again (conflict)", "verdict", {"verdict": "fail"})
    req("show of another ticket (unauthorized)", "show", {"ref": "T999"})
    req("operator verb on the worker socket (unauthorized)", "post", {"path": "tickets/x.md"})
    req("unknown verb on the worker socket (unauthorized)", "frobnicate")
    req("wrong token (unauthorized)", "brief", token="not-the-token")
    req("operator socket from inside a run (not visible)", "show", token=None,
        path=sys.argv[4])
    req("confidence as a float (invalid_arguments)", "verdict",
        {"verdict": "pass", "confidence": 0.9})
    print("worker: done", flush=True)
elif mode == "work":
    commit(env["SLOOP_TICKET"] + "-work.txt")
elif mode == "commit":
    commit("review-me.txt")
    print("implementer: committed review-me.txt", flush=True)
elif mode == "seat":
    req("brief (panel seat)", "brief")
    req("verdict without reason from a seat (invalid_arguments)", "verdict", {"verdict": "pass"})
    req("note (panel seat)", "note", {"text": "read the diff"})
    req("verdict (panel seat)", "verdict",
        {"verdict": "pass", "reason": "the change matches the ticket", "confidence": "medium"})
elif mode == "slow":
    for n in range(1, 121):
        print(f"slow agent: step {n}", flush=True)
    print("slow agent: a warning on stderr", file=sys.stderr, flush=True)
    req("note (slow)", "note", {"text": "waiting for the operator"})
    flag = sys.argv[3]
    deadline = time.monotonic() + 120
    while not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.05)
elif mode == "limit":
    print("working...", flush=True)
    print(f"Claude AI usage limit reached|{int(time.time()) + 3600}", flush=True)
    sys.exit(1)
'''


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *IDENTITY, *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


class Capture:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(str(path))
        self.reader = self.sock.makefile("rb")
        self.n = 0

    def raw(self, label: str, line: bytes, show: bool = True) -> dict[str, Any]:
        self.sock.sendall(line + b"\n")
        reply = self.reader.readline()
        if show:
            shown = line if len(line) < 400 else line[:60] + b"...(%d bytes)" % len(line)
            print(f"### {label}\n> {shown.decode()}\n< {reply.decode().rstrip()}\n", flush=True)
        result: dict[str, Any] = json.loads(reply)
        return result

    def call(
        self, label: str | None, verb: str, args: dict[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        self.n += 1
        message: dict[str, Any] = {
            "v": 1,
            "id": str(self.n),
            "verb": verb,
            "args": args or {},
            "token": None,
        }
        message.update(extra)
        line = json.dumps(message, separators=(",", ":")).encode()
        return self.raw(label or "", line, show=label is not None)

    def quiet(self, verb: str, args: dict[str, Any] | None = None) -> Any:
        reply = self.call(None, verb, args)
        assert reply["ok"], reply
        return reply["data"]


def wait_for(predicate: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit("timed out waiting")


def start(
    repo: Path, state: Path, sockets: Path, log: Path
) -> tuple[subprocess.Popen[bytes], Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOOP_")}
    env.pop("NOTIFY_SOCKET", None)
    argv = [sys.executable, "-m", "sloopd", "serve", "--repo", str(repo)]
    argv += ["--state-dir", str(state), "--socket-dir", str(sockets)]
    with log.open("ab") as sink:
        proc = subprocess.Popen(argv, cwd=repo, stdout=subprocess.PIPE, stderr=sink, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line:
        raise SystemExit(f"daemon did not start; see {log}")
    return proc, Path(line)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(20)


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="spx", dir="/tmp"))
    repo, state, sockets = root / "repo", root / "state", root / "s"
    captures = root / "captures"
    captures.mkdir()
    flags = root / "flags"
    flags.mkdir()
    repo.mkdir()
    agent = root / "worker_agent.py"
    agent.write_text(WORKER_AGENT)
    op_sock = str(sockets / "operator.sock")
    py = sys.executable

    def cmd(*args: str) -> str:
        return toml_list([py, str(agent), *args])

    (repo / "sloop.toml").write_text(
        f"""\
[repo]
parallel = 2

[agent]
command = {cmd("reported", str(captures), "-", op_sock)}
# The capture folders, shared with every sandbox on purpose.
rw_mounts = {toml_list([str(captures), str(flags)])}
stall_after = "1s"
stall_kill_after = "1h"

[[flows.default.stages]]
name = "implement"
action = "agent"
command = {cmd("work", str(captures))}

[[flows.default.stages]]
name = "check"
action = "agent"
result_check = "reported"
prompt = "Check the work against the ticket, then report a verdict."

[[flows.default.stages]]
name = "sync"
action = "sync"

[[flows.default.stages]]
name = "merge"
action = "ff_only"
return_to = "sync"
returns = 3

[[flows.reviewed.stages]]
name = "implement"
action = "agent"
command = {cmd("commit", str(captures))}

[[flows.reviewed.stages]]
name = "lint"
action = "command"
command = {toml_list([py, "-c", "print('lint: 1 warning'); raise SystemExit(1)"])}
fail_action = "continue"

[[flows.reviewed.stages]]
name = "review"
action = "agent"
result_check = "panel"
quorum = 1
prompt = "Review the branch against the ticket."
reviewers = [ {{ target = "probe", command = {cmd("seat", str(captures))} }} ]

[[flows.reviewed.stages]]
name = "sync"
action = "sync"

[[flows.reviewed.stages]]
name = "merge"
action = "ff_only"
return_to = "sync"
returns = 3

[[flows.slow.stages]]
name = "implement"
action = "agent"
command = {cmd("slow", str(captures), str(flags / "go"))}

[[flows.slow.stages]]
name = "sync"
action = "sync"

[[flows.slow.stages]]
name = "merge"
action = "ff_only"

[[flows.limited.stages]]
name = "implement"
action = "agent"
command = {cmd("limit", str(captures))}

[[flows.limited.stages]]
name = "sync"
action = "sync"

[[flows.limited.stages]]
name = "merge"
action = "ff_only"
"""
    )
    tickets = repo / "tickets"
    (tickets / "docs").mkdir(parents=True)
    (tickets / "greeting.md").write_text("# Add a greeting\n\nWrite greeting.txt.\n")
    (tickets / "review-me.md").write_text(
        '+++\nflow = "reviewed"\npriority = 2\n+++\n# A reviewed change\n\nReviewed by a panel.\n'
    )
    (tickets / "slow-one.md").write_text('+++\nflow = "slow"\n+++\n# A slow change\n')
    (tickets / "limited.md").write_text('+++\nflow = "limited"\n+++\n# Hits a usage limit\n')
    (tickets / "docs" / "usage.md").write_text("# Document usage\n\nOne paragraph.\n")
    (tickets / "docs" / "faq.md").write_text("# Write an FAQ\n")
    (tickets / "later.md").write_text("# Scheduled for later\n")
    (tickets / "dup").mkdir()
    (tickets / "dup" / "greeting.md").write_text("# Another greeting\n")
    (repo / ".gitignore").write_text("greeting.txt.tmp\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")

    log = root / "daemon.log"
    proc, path = start(repo, state, sockets, log)
    print(f"# operator socket: {path}\n# root: {root}\n")
    c = Capture(path)
    try:
        c.call("show: dashboard of a fresh daemon", "show")
        c.call("post: a new ticket", "post", {"path": "tickets/greeting.md"})
        wait_for(lambda: c.quiet("show", {"ref": "greeting"})["value"]["runs"])
        c.call(
            "wait (deprecated): until greeting#1 settles",
            "wait",
            {"run": "greeting#1", "timeout_ms": 30000},
        )
        c.call("post: repost of a merged ticket", "post", {"path": "tickets/greeting.md"})
        c.call("post: name clash (conflict)", "post", {"path": "tickets/dup/greeting.md"})
        c.call("run: on a merged ticket (conflict)", "run", {"ref": "greeting"})

        c.call("post: reviewed flow", "post", {"path": "tickets/review-me.md"})
        wait_for(lambda: c.quiet("show", {"ref": "review-me"})["value"]["runs"])
        c.quiet("wait", {"run": "review-me#1", "timeout_ms": 30000})

        c.call("post: --hold", "post", {"path": "tickets/docs/usage.md", "hold": True})
        c.call("post: --manual", "post", {"path": "tickets/docs/faq.md", "manual": True})
        c.call(
            "post: hold-requested trigger on a held ticket",
            "post",
            {"path": "tickets/docs/usage.md"},
        )

        # A usage limit closes the gate.
        c.call(None, "post", {"path": "tickets/limited.md"})
        wait_for(lambda: c.quiet("show")["gate"]["state"] == "cooldown")
        c.call("show: dashboard during a cooldown", "show", {"limit": 3})
        c.call("run: during a cooldown (cooldown_active)", "run", {"ref": "faq"})
        c.call("hold: a ready ticket", "hold", {"ref": "limited"})
        c.call("resume: end a cooldown early", "resume")
        c.call("resume: on an open gate", "resume")

        # A slow run in flight.
        later = int(time.time() * 1000) + 3_600_000
        c.call(
            "post: with a trigger due later",
            "post",
            {"path": "tickets/later.md", "trigger": {"at_ms": later}},
        )
        c.call("post: slow ticket", "post", {"path": "tickets/slow-one.md"})
        wait_for(lambda: c.quiet("show", {"ref": "slow-one"})["value"]["runs"])
        wait_for(
            lambda: (
                len(c.quiet("logs", {"run": "slow-one#1", "tail": 1})["records"])
                and c.quiet("logs", {"run": "slow-one#1", "tail": 1})["records"][0]["stream"]
                == "note"
            )
        )
        time.sleep(1.3)  # past stall_after
        c.call("show: dashboard with a run in flight", "show")
        c.call("show: a run in flight", "show", {"ref": "slow-one#1"})
        first = c.call("logs: first page (100 records)", "logs", {"run": "slow-one#1"})
        c.call(
            "logs: next page", "logs", {"run": "slow-one#1", "after": first["data"]["next_cursor"]}
        )
        tail = c.call(
            "logs: tail of one execution",
            "logs",
            {"run": "slow-one#1", "stage": "implement#1", "tail": 3},
        )
        c.call(
            "logs: poll after the tail",
            "logs",
            {"run": "slow-one#1", "after": tail["data"]["next_cursor"]},
        )
        c.call(
            "logs: an attempt never reached", "logs", {"run": "slow-one#1", "stage": "implement#2"}
        )
        c.call(
            "logs: unknown stage (invalid_arguments)",
            "logs",
            {"run": "slow-one#1", "stage": "deploy"},
        )
        c.call(
            "logs: bad cursor (invalid_arguments)", "logs", {"run": "slow-one#1", "after": "abc"}
        )
        c.call("pause", "pause", {"reason": "release freeze"})
        c.call("run: during a pause (queues)", "run", {"ref": "faq"})
        c.call("ready: release a held ticket", "ready", {"ref": "usage"})
        c.call("hold: on a running ticket (conflict)", "hold", {"ref": "slow-one"})
        c.call("status (deprecated)", "status")
        c.call("list (deprecated)", "list")
        c.call("list (deprecated) with a pattern", "list", {"ref": "^(faq|usage)$", "limit": 1})
        c.call("abort", "abort", {"run": "slow-one#1"})
        c.call("abort: a settled run (conflict)", "abort", {"run": "slow-one#1"})
        c.call("logs: tail of a settled run", "logs", {"run": "slow-one#1", "tail": 2})
        c.call("show: a ticket", "show", {"ref": "greeting"})
        c.call("show: a run with a panel", "show", {"ref": "review-me#1"})
        c.call("show: a run that hit a usage limit", "show", {"ref": "limited#1"})
        c.call("show: a project", "show", {"ref": "project:docs"})
        c.call("show: substring pattern", "show", {"ref": "GREET"})
        c.call("show: regex pattern with limit", "show", {"ref": "^(slow|later)", "limit": 1})
        c.call("show: invalid regex (invalid_arguments)", "show", {"ref": "(unclosed"})
        c.call("show: not a reference, pattern matches nothing", "show", {"ref": "nomatch"})
        c.call("hold: unknown ticket (not_found)", "hold", {"ref": "no-such-ticket"})
        c.call("abort: unknown run (not_found)", "abort", {"run": "R999"})
        c.call("events: tail", "events", {"tail": 4})
        c.call("events: first page", "events", {})
        c.call("events: scoped to a run", "events", {"scope": "slow-one#1"})
        c.call(
            "events: scoped to a pattern, after a cursor",
            "events",
            {"scope": "limited", "after": "3"},
        )
        c.call("resume: end the pause", "resume")
        wait_for(lambda: c.quiet("show", {"ref": "usage"})["value"]["state"] == "merged")
        wait_for(lambda: c.quiet("show", {"ref": "faq"})["value"]["state"] == "merged")
        c.call("gc", "gc")
        c.call("gc: nothing left", "gc")
        c.call("diff: a merged run", "diff", {"run": "greeting#1"})
        c.call("diff: cut at max_bytes", "diff", {"run": "greeting#1", "max_bytes": 80})
        c.call("diff: unknown run (not_found)", "diff", {"run": "R999"})
        c.call("run: a held ticket that already has a trigger", "run", {"ref": "limited"})

        # Envelope and argument errors.
        c.raw("malformed JSON", b'{"v":1,"id":"x",')
        c.raw("not an object", b'["show"]')
        c.raw("wrong version", b'{"v":2,"id":"x1","verb":"show","args":{}}')
        c.raw("v missing", b'{"id":"x2","verb":"show","args":{}}')
        c.raw("id of the wrong type", b'{"v":1,"id":true,"verb":"show","args":{}}')
        c.raw("args missing", b'{"v":1,"id":"x3","verb":"show"}')
        c.raw("token not a string", b'{"v":1,"id":"x4","verb":"show","args":{},"token":5}')
        c.raw("unknown verb", b'{"v":1,"id":"x5","verb":"frobnicate","args":{}}')
        c.raw(
            "integer id, unknown envelope field ignored, token omitted",
            b'{"v":1,"id":42,"verb":"show","args":{"ref":"later"},"trace":"abc"}',
        )
        c.raw(
            "null optional arguments",
            b'{"v":1,"id":"x6","verb":"show","args":{"ref":null,"limit":null}}',
        )
        c.call(
            "unknown argument: the retired activation (invalid_arguments)",
            "post",
            {"path": "tickets/later.md", "activation": {"at_ms": 0}},
        )
        c.call(
            "unknown field inside trigger (invalid_arguments)",
            "run",
            {"ref": "later", "trigger": {"activation": 1}},
        )
        c.call("integer above 2**53-1 (invalid_arguments)", "show", {"limit": 2**53})
        c.call("limit 0 (invalid_arguments)", "show", {"limit": 0})
        c.call("boolean where an integer is expected", "events", {"tail": True})
        c.call("required argument missing", "abort", {})
        c.call("empty string (invalid_arguments)", "show", {"ref": ""})
        c.call(
            "ticket file does not exist (invalid_arguments)", "post", {"path": "tickets/missing.md"}
        )
        c.call("token on the operator socket (unauthorized)", "show", token="abc")
        c.call("worker verb on the operator socket (unauthorized)", "brief")
        c.raw(
            "over-long line (invalid_request)",
            b'{"v":1,"id":"big","verb":"show","args":{"ref":"' + b"x" * (1024 * 1024) + b'"}}',
        )
        c.call("the connection stays usable after it", "show", {"ref": "T1", "limit": 1})
        # Pipelining: two requests in one write, replies in order.
        first = b'{"v":1,"id":"p1","verb":"gc","args":{}}'
        second = b'{"v":1,"id":"p2","verb":"resume","args":{}}'
        c.sock.sendall(first + b"\n" + second + b"\n")
        print(
            "### pipelined\n> "
            + first.decode()
            + "\n> "
            + second.decode()
            + "\n< "
            + c.reader.readline().decode().rstrip()
            + "\n< "
            + c.reader.readline().decode().rstrip()
            + "\n"
        )
    finally:
        (flags / "go").write_text("go\n")
        c.sock.close()
        stop(proc)

    print("# ---- worker-socket captures ----\n")
    for file in sorted(captures.glob("*.json")):
        print(f"## {file.stem}")
        for item in json.loads(file.read_text()):
            print(f"### {item['label']}\n> {item['request']}\n< {item['response']}\n")

    # A store from the future: the daemon serves only show.
    import apsw

    conn = apsw.Connection(str(state / "store.sqlite3"))
    version = conn.execute("PRAGMA user_version").fetchall()[0][0]
    conn.execute(f"PRAGMA user_version = {version + 1}")
    conn.close()
    proc, path = start(repo, state, sockets, log)
    c = Capture(path)
    try:
        c.call("refused store: show", "show")
        c.call("refused store: post (daemon_unavailable)", "post", {"path": "tickets/later.md"})
    finally:
        c.sock.close()
        stop(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
