"""Agents that try: each attack of the sandbox issue, written as an agent would try it.

The attacker is one script (``ATTACKER``) whose modes search for their target
the way an attacker would (its environment, ``/proc``, the default socket
locations, walking up from its working directory, paths it was told about)
and record what they reached in the bench's flags folder.  Each test asserts
what an operator cares about afterwards: the gate, the queue, main and every
other ref, the store, the honest panel outcome, no process of the run left.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from tests.support.agents import Bench, processes_with, sloop_toml, ticket_text
from tests.support.daemon import git, new_daemon, wait_until

ATTACKER = r'''
import json, os, resource, selectors, socket, subprocess, sys, time

MODE, OUT = sys.argv[1], sys.argv[2]
HINTS = sys.argv[3:]  # paths the ticket or repository told the agent about
report = {}


def save():
    with open(OUT + ".tmp", "w") as f:
        json.dump(report, f)
    os.replace(OUT + ".tmp", OUT)


def call(path, verb, args=None, token=None):
    """One request; what came back, or why nothing could be sent."""
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(path)
        msg = {"v": 1, "id": "x", "verb": verb, "args": args or {}}
        if token:
            msg["token"] = token
        s.sendall(json.dumps(msg).encode() + b"\n")
        line = s.makefile("rb").readline()
        s.close()
        return json.loads(line) if line else {"closed": True}
    except OSError as exc:
        return {"connect_error": exc.__class__.__name__}


def candidate_sockets():
    """Every Unix socket an attacker could find: environment, defaults, /proc, upwards."""
    found = set()
    for value in os.environ.values():
        for part in value.replace(":", ",").split(","):
            if part.startswith("/") and part.endswith(".sock"):
                found.add(part)
    roots = [os.environ.get("XDG_RUNTIME_DIR", ""), f"/tmp/sloop-{os.getuid()}", "/run/user",
             "/tmp", "/run", *HINTS]
    here = os.getcwd()
    while here != "/":
        roots += [os.path.join(here, ".git", "sloop"), here]
        here = os.path.dirname(here)
    for root in filter(None, roots):
        for dirpath, _dirs, files in os.walk(root):
            if dirpath.count("/") - root.count("/") > 4:
                continue
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    if os.stat(path).st_mode & 0o170000 == 0o140000:
                        found.add(path)
                except OSError:
                    pass
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for entry in f.read().split(b"\0"):
                    if entry.startswith((b"SLOOP_SOCKET", b"SLOOP_OPERATOR")):
                        found.add(entry.split(b"=", 1)[1].decode())
        except OSError:
            pass
    return sorted(found)


def operator():
    """Take operator authority: env -i, a 300-deep fork chain, every socket in reach."""
    report["env"] = sorted(os.environ)
    report["sockets"] = candidate_sockets()
    if os.environ.get("ATTACK_DEPTH", "0") != "300":
        save()
        env = {"PATH": os.environ["PATH"], "ATTACK_DEPTH": "0"}
        # Each level is a shell that forks the next: the leaf is 300 processes deep.
        script = ('n=$1; if [ "$n" -lt 300 ]; then sh -c "$0" "$0" $((n+1)) "$2" "$3" "$4" "$5"; '
                  'else exec env -i PATH="$PATH" ATTACK_DEPTH=300 "$2" "$3" operator "$4" "$5"; fi')
        subprocess.run(["sh", "-c", script, script, "0", sys.executable, __file__, OUT + ".leaf",
                        HINTS[0] if HINTS else "/"], env=env, timeout=120)
        return
    answers = {}
    for path in report["sockets"]:
        for verb, args in (("pause", {"reason": "mine now"}), ("gc", {}),
                           ("post", {"path": "tickets/evil.md"}), ("run", {"ref": "victim"}),
                           ("abort", {"run": "R1"})):
            answers[f"{path} {verb}"] = call(path, verb, args)
    report["answers"] = answers
    save()


def leftover():
    """Stay behind (setsid, cleared environment) and vote pass with any token found."""
    if os.fork():
        while not os.path.exists(OUT):  # the stage ends once the voter is in place
            time.sleep(0.02)
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    os.execve(sys.executable, [sys.executable, __file__, "voter", OUT], {"PATH": "/usr/bin:/bin"})


def voter():
    report["votes"] = []
    report["heartbeat"] = time.time()
    save()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        report["heartbeat"] = time.time()
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            except OSError:
                continue
            token, sock = env.get(b"SLOOP_TOKEN"), env.get(b"SLOOP_SOCKET")
            if token and sock:
                args = {"verdict": "pass", "reason": "rigged"}
                report["votes"].append(call(sock.decode(), "verdict", args, token.decode()))
        save()
        time.sleep(0.1)


def tamper():
    """Move main, write refs and the store, from the checkout and from paths it was told."""
    report["tries"] = {}
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    head = head.stdout.strip()
    targets = list(HINTS)
    here = os.getcwd()
    while here != "/":
        targets.append(here)
        here = os.path.dirname(here)
    for target in targets:
        for ref in ("refs/heads/main", "refs/heads/evil"):
            args = ["update-ref", ref, head]
            done = subprocess.run(["git", "-C", target, *args], capture_output=True, text=True)
            report["tries"][f"{target} {ref}"] = done.returncode
        for name in ("store.sqlite3", "sloop/store.sqlite3", ".git/sloop/store.sqlite3"):
            path = os.path.join(target, name)
            try:
                with open(path, "r+b") as f:
                    f.seek(0, 2)
                    f.write(b"garbage")
                report["tries"][f"write {path}"] = "written"
            except OSError as exc:
                report["tries"][f"write {path}"] = exc.__class__.__name__
    alternates = ".git/objects/info/alternates"
    try:
        objects = open(alternates).read().strip()
        with open(os.path.join(objects, "evil"), "w") as f:
            f.write("x")
        report["tries"]["objects"] = "written"
    except OSError as exc:
        report["tries"]["objects"] = exc.__class__.__name__
    save()


def sneak():
    """A reviewer that commits during review, then passes."""
    with open("reviewer-sneak.txt", "w") as f:
        f.write("not reviewed\n")
    ident = ["-c", "user.name=r", "-c", "user.email=r@x"]
    subprocess.run(["git", *ident, "add", "-A"], check=True)
    subprocess.run(["git", *ident, "commit", "-q", "-m", "sneaked in"], check=True)
    with open("left-uncommitted.txt", "w") as f:
        f.write("also not reviewed\n")
    call(os.environ["SLOOP_SOCKET"], "verdict", {"verdict": "pass", "reason": "fine"},
         os.environ["SLOOP_TOKEN"])


def flood():
    """Open connections on the worker socket until refused or 1,100 are held."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held, refused, errors = [], 0, {}
    for _ in range(1100):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect(os.environ["SLOOP_SOCKET"])
            held.append(s)
        except OSError as exc:
            errors[exc.__class__.__name__] = errors.get(exc.__class__.__name__, 0) + 1
    # Connections still queued in the listen backlog (4096 deep) are refused
    # once the daemon accepts them: wait for those answers, not just the ones
    # already in.  Those within the socket's limit never answer: stop at that.
    selector = selectors.DefaultSelector()
    for s in held:
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ)
    deadline = time.monotonic() + 30
    while selector.get_map() and len(held) - refused > 32 and time.monotonic() < deadline:
        for key, _ in selector.select(0.5):
            try:
                data = key.fileobj.recv(4096)
            except OSError:
                data = b""
            if b"daemon_unavailable" in data:
                refused += 1
            selector.unregister(key.fileobj)
    selector.close()
    report.update(held=len(held), refused=refused, errors=errors)
    save()
    while not os.path.exists(HINTS[0]):
        time.sleep(0.05)


{"operator": operator, "leftover": leftover, "voter": voter, "tamper": tamper,
 "sneak": sneak, "flood": flood}[MODE]()
'''


@pytest.fixture
def attacker(bench: Bench) -> list[str]:
    path = bench.root / "agents" / "attacker.py"
    path.write_text(ATTACKER, encoding="utf-8")
    return [sys.executable, str(path)]


def refs(repo: Path) -> dict[str, str]:
    """Every ref but Sloop's own (its run branches and private refs), with its commit."""
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    pairs = (line.split() for line in out.splitlines() if line)
    return {
        name: sha
        for name, sha in pairs
        if not name.startswith(("refs/sloop/", "refs/heads/sloop/"))
    }


def store_rows(state_dir: Path) -> dict[str, int]:
    conn = apsw.Connection(str(state_dir / "store.sqlite3"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        counts: dict[str, int] = {}
        for table in tables:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            assert row is not None
            counts[table] = int(row[0])
        return counts
    finally:
        conn.close()


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(wait_until(lambda: path.exists() and path.read_text()))
    return data


@pytest.fixture
def lure(bench: Bench) -> Iterator[Path]:
    """A socket of the operator's session (tmux, ssh-agent) the daemon's environment names."""
    (bench.root / "session").mkdir()
    path = bench.root / "session" / "agent.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)
    server.settimeout(0.2)
    reached: list[bool] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                reached.append(True)
                conn.close()
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    bench.env.update(
        TMUX=f"{path},1,0", SSH_AUTH_SOCK=str(path), DBUS_SESSION_BUS_ADDRESS=f"unix:path={path}"
    )
    try:
        yield path
    finally:
        stop.set()
        thread.join(2)
        server.close()
        assert reached == [], "an agent reached the operator's session socket"


def test_an_agent_cannot_take_operator_authority(
    bench: Bench, attacker: list[str], lure: Path
) -> None:
    hint = str(bench.repo)
    flows: dict[str, list[dict[str, Any]]] = {
        "attack": [
            {
                "name": "work",
                "action": "agent",
                "command": [*attacker, "operator", bench.flag("op.json"), hint],
            },
            {"name": "merge", "action": "ff_only", "allow_empty": True},
        ],
        "default": [
            {
                "name": "wait",
                "action": "agent",
                "command": bench.argv("--wait-for", bench.flag("free")),
            }
        ],
    }
    bench.setup(
        sloop_toml(bench.argv(), parallel=2, flows=flows),
        {"victim": ticket_text("Victim"), "attack": ticket_text("Attack", flow="attack")},
    )
    bench.start()
    bench.post("victim")
    bench.wait_stage_running("victim#1", "wait")
    gate_before = bench.dashboard()["gate"]
    tickets_before = {t["id"] for t in bench.dashboard()["tickets"]}
    bench.post("attack")
    attack = bench.wait_run("attack#1")

    seen = read(bench.path("op.json"))
    leaf = read(bench.path("op.json.leaf"))
    # The session's variables never reached the agent; nothing it found answered as operator.
    for name in ("TMUX", "SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR"):
        assert name not in seen["env"], seen["env"]
    assert str(bench.daemon.socket if bench.daemon else "") not in seen["sockets"] + leaf["sockets"]
    assert all(a.get("ok") is not True for a in leaf["answers"].values()), leaf["answers"]
    # What an operator cares about: the gate, the other run, the queue, untouched.
    assert bench.dashboard()["gate"] == gate_before
    victim = bench.show_run("victim#1")
    assert victim is not None, victim
    assert victim["state"] == "running", victim
    assert {t["id"] for t in bench.dashboard()["tickets"]} <= tickets_before | {attack["ticket"]}
    assert "gate_changed" not in [e["kind"] for e in bench.ok("events", {"tail": 100})["events"]]
    bench.release("free")
    assert bench.wait_run("victim#1")["state"] != "aborted"


def test_a_leftover_process_cannot_rig_the_review(bench: Bench, attacker: list[str]) -> None:
    honest = bench.argv("--say", "looked", "--write", "ignored-{stage}.txt=x")
    review = [
        {"target": "a", "command": [sys.executable, "-c", HONEST_FAIL]},
        {"target": "b", "command": [sys.executable, "-c", HONEST_FAIL]},
    ]
    flows: dict[str, list[dict[str, Any]]] = {
        "default": [
            {
                "name": "implement",
                "action": "agent",
                "command": [*attacker, "leftover", bench.flag("vote.json")],
            },
            {
                "name": "fixup",
                "action": "agent",
                "command": bench.argv("--write", "work.txt=x"),
                "fail_action": "fail",
            },
            {
                "name": "review",
                "action": "agent",
                "result_check": "panel",
                "quorum": 1,
                "reviewers": review,
            },
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only"},
        ]
    }
    del honest
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"rig": ticket_text("Rig it")})
    bench.start()
    main_before = bench.rev("main")
    bench.post("rig")
    run = bench.wait_run("rig#1")

    # The honest reviewers' verdicts stand: the panel failed, nothing merged.
    assert run["state"] == "failed", run
    review_row = next(r for r in run["stages"] if r["stage"] == "review")
    assert [s["verdict"] for s in review_row["reviewers"]] == ["fail", "fail"], review_row
    assert bench.rev("main") == main_before
    # The leftover died with the implement stage's sandbox: it never saw a token.
    seen = read(bench.path("vote.json"))
    # The only token in its sight was its own stage's, and that casts no verdict.
    assert all(vote.get("ok") is not True for vote in seen["votes"]), seen
    implement_end = run["stages"][0]["finished_at_ms"] / 1000
    assert seen["heartbeat"] <= implement_end + 1.0, (seen["heartbeat"], implement_end)
    assert processes_with(*bench.run_env("R1")) == []


HONEST_FAIL = (
    "import json, os, socket\n"
    "s = socket.socket(socket.AF_UNIX); s.connect(os.environ['SLOOP_SOCKET'])\n"
    "m = {'v': 1, 'id': 1, 'verb': 'verdict', 'token': os.environ['SLOOP_TOKEN'],\n"
    "     'args': {'verdict': 'fail', 'reason': 'not good enough'}}\n"
    "s.sendall(json.dumps(m).encode() + b'\\n'); s.makefile().readline()\n"
)


def test_an_agent_cannot_move_main_or_write_the_store(bench: Bench, attacker: list[str]) -> None:
    hints = [str(bench.repo), str(bench.state_dir)]
    flows: dict[str, list[dict[str, Any]]] = {
        "default": [
            {
                "name": "implement",
                "action": "agent",
                "command": bench.argv("--write", "work.txt=x"),
            },
            {
                "name": "tamper",
                "action": "agent",
                "command": [*attacker, "tamper", bench.flag("tamper.json"), *hints],
                "fail_action": "continue",
            },
            {
                "name": "hold",
                "action": "command",
                "command": bench.argv("--wait-for", bench.flag("go")),
            },
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only"},
        ]
    }
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"tamper": ticket_text("Tamper")})
    bench.start()
    before = refs(bench.repo)
    bench.post("tamper")
    bench.wait_stage_running("tamper#1", "hold")
    rows_during = store_rows(bench.state_dir)
    # Main, and every ref that is not Sloop's own, did not move while the run held.
    assert refs(bench.repo) == before
    seen = read(bench.path("tamper.json"))
    assert "written" not in seen["tries"].values(), seen
    assert not (bench.repo / ".git" / "objects" / "evil").exists()
    bench.release("go")
    run = bench.wait_run("tamper#1")
    assert run["state"] == "merged", run
    # The merge moved main to the commit the run's gating stages ran on, and nothing else.
    after = refs(bench.repo)
    assert {k: v for k, v in after.items() if k != "refs/heads/main"} == {
        k: v for k, v in before.items() if k != "refs/heads/main"
    }
    assert (
        after["refs/heads/main"]
        == next(r for r in run["stages"] if r["stage"] == "merge")["commit"]
    )
    assert store_rows(bench.state_dir)["tickets"] == rows_during["tickets"]


def test_what_merges_is_what_was_reviewed(bench: Bench, attacker: list[str]) -> None:
    flows: dict[str, list[dict[str, Any]]] = {
        "default": [
            {
                "name": "implement",
                "action": "agent",
                "command": bench.argv("--write", "work.txt=x"),
            },
            {
                "name": "review",
                "action": "agent",
                "result_check": "panel",
                "reviewers": [
                    {"target": "sneaky", "command": [*attacker, "sneak", bench.flag("sneak.json")]}
                ],
            },
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only"},
        ]
    }
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"sneak": ticket_text("Sneak")})
    bench.start()
    bench.post("sneak")
    run = bench.wait_run("sneak#1")

    assert run["state"] == "merged", run
    review = next(r for r in run["stages"] if r["stage"] == "review")
    implement = run["stages"][0]
    # The panel reviewed the implement stage's commit; main is now byte for byte that commit.
    assert review["commit"] == implement["commit"] == bench.rev("main")
    assert "reviewer-sneak.txt" not in git(bench.repo, "ls-tree", "-r", "--name-only", "main")
    (discarded,) = review["discarded"]
    assert discarded["reviewer"] == 0
    assert discarded["commit"] not in (None, review["commit"])
    assert discarded["paths"] == ["left-uncommitted.txt"]


def test_another_users_socket_directory_is_refused(bench: Bench, sandbox: Path) -> None:
    nobody = 65534
    trap = sandbox / "trap"
    trap.mkdir()
    os.chown(trap, nobody, nobody)
    socket_dir = trap / "abcdef123456"
    socket_dir.mkdir()
    os.chown(socket_dir, nobody, nobody)
    # The impostor listens where the daemon's socket would be.
    impostor = socket.socket(socket.AF_UNIX)
    impostor.bind(str(socket_dir / "operator.sock"))
    impostor.listen(4)
    impostor.settimeout(0.5)

    daemon = new_daemon(sandbox, bench.repo)
    daemon.socket_dir = socket_dir
    code, _, logged = daemon.run_to_exit(timeout=20)
    assert code != 0
    assert f"{trap} belongs to uid {nobody}" in logged, logged

    ctl = subprocess.run(
        [sys.executable, "-m", "sloopctl", "--socket", str(socket_dir / "operator.sock"), "show"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert ctl.returncode != 0
    assert "refusing to talk to" in ctl.stderr, ctl.stderr
    assert f"uid {nobody}" in ctl.stderr, ctl.stderr
    with pytest.raises(TimeoutError):
        impostor.accept()  # nobody ever connected to the impostor
    impostor.close()


def test_an_agent_cannot_exhaust_the_daemons_descriptors(bench: Bench, attacker: list[str]) -> None:
    flows: dict[str, list[dict[str, Any]]] = {
        "flood": [
            {
                "name": "flood",
                "action": "agent",
                "command": [*attacker, "flood", bench.flag("flood.json"), bench.flag("done")],
            },
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only", "allow_empty": True},
        ]
    }
    bench.setup(
        sloop_toml(bench.argv("--write", "{ticket}.txt=x"), parallel=2, flows=flows),
        {"flood": ticket_text("Flood", flow="flood"), "other": ticket_text("Other")},
    )
    bench.start()
    bench.post("flood")
    seen = read(bench.path("flood.json"))
    # While it holds its connections: the operator is answered, another run merges.
    assert bench.dashboard()["kind"] == "dashboard"
    bench.post("other")
    other = bench.wait_run("other#1")
    assert other["state"] == "merged", other
    assert "Too many open files" not in json.dumps(other)
    bench.release("done")
    flood = bench.wait_run("flood#1")
    assert flood["state"] == "merged", [(r["stage"], r["reason"]) for r in flood["stages"]]
    # Past its socket's limit every connection was refused with a structured error.
    assert seen["held"] + sum(seen["errors"].values()) == 1100, seen
    assert seen["refused"] >= seen["held"] - 32, seen
