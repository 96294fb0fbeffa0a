"""Issue 36: copy-on-write checkouts, through the real daemon.

Each stage execution starts in its own writable layer over trees the daemon made
once (``sloopd.git.shared_trees``).  What must still be true: an agent's writes
reach neither the shared tree, nor another run's stage, nor another instance; a
crash while a tree is made leaves nothing half-made in use; the disk the trees
take is bounded; where the host allows no overlay the daemon falls back to whole
checkouts and says so; a run that did not merge keeps a whole checkout to read.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import git, make_repo, query, short_tmpdir, wait_until

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

SHARED_FILES = {f"src/f{n}.txt": f"orig {n}\n" for n in range(20)}

# An agent that writes through everything it can reach, then looks for the layers
# under its checkout (the mount table names them) and for the shared trees' folder.
ATTACK = r"""
import json, os, sys
flags, trees = sys.argv[1], sys.argv[2]
tried = {}
for top, dirs, files in os.walk("."):
    dirs[:] = [d for d in dirs if d != ".git"]
    for name in files:
        path = os.path.join(top, name)
        with open(path, "r+") as handle:
            handle.write("EVIL")
        os.chmod(path, 0o777)
os.remove("src/f0.txt")
open("planted.txt", "w").write("planted\n")
mounts = open("/proc/self/mountinfo").read()
line = next(ln for ln in mounts.splitlines() if " /sloop/work " in ln)
tried["fs"] = line.split(" - ")[1].split()[0]
options = line.split(" - ")[1].split()[2].split(",")
places = [o.split("=", 1)[1] for o in options if o.startswith(("lowerdir=", "upperdir="))]
for place in [p for each in places for p in each.split(":")] + [trees]:
    for target in (place, os.path.join(place, "src", "f1.txt")):
        try:
            with open(target, "a") as handle:
                handle.write("EVIL")
            tried[target] = "written"
        except OSError as exc:
            tried[target] = exc.__class__.__name__
json.dump(tried, open(os.path.join(flags, "attack.json"), "w"))
open(os.path.join(flags, "attacked"), "w").write("done")
sys.exit(1)
"""

# A stage of another run, at the same time: what it sees of the shared files.
LOOK = r"""
import json, os, sys, time
flags = sys.argv[1]
deadline = time.time() + 60
while not os.path.exists(os.path.join(flags, "attacked")) and time.time() < deadline:
    time.sleep(0.05)
seen = {}
for top, dirs, files in os.walk("."):
    dirs[:] = [d for d in dirs if d != ".git"]
    for name in files:
        path = os.path.relpath(os.path.join(top, name))
        seen[path] = open(path).read()
json.dump(seen, open(os.path.join(flags, "seen.json"), "w"))
"""


def copying(kept: Path) -> bool:
    """Whether the daemon's ``cp`` into a kept checkout still runs."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:1] == [b"cp"] and b"/sloop/keep/" in argv:
            return True
    return False


def trees_root(bench: Bench) -> Path:
    return bench.state_dir / f"trees-{os.getuid()}"


def layers(bench: Bench) -> list[Path]:
    root = trees_root(bench)
    return sorted(p for p in root.iterdir() if (p / "meta").is_file()) if root.is_dir() else []


def workspaces(bench: Bench) -> dict[str, Any]:
    info: dict[str, Any] = bench.dashboard()["daemon"]["sandbox"]["workspaces"]
    return info


def with_files(bench: Bench, files: dict[str, str]) -> None:
    for name, text in files.items():
        target = bench.repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    git(bench.repo, "add", "-A")
    git(bench.repo, "commit", "-q", "-m", "shared files")


def merging(*stages: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The default flow: the given stages, then sync and ff_only."""
    tail = [{"name": "sync", "action": "sync"}, {"name": "merge", "action": "ff_only"}]
    return {"default": [*stages, *tail]}


def command(script: str, *args: str) -> list[str]:
    return [sys.executable, "-c", script, *args]


def test_stages_start_in_a_layer_of_their_own_and_the_daemon_says_so(bench: Bench) -> None:
    look = {"name": "look", "action": "command", "command": command(LOOK, bench.flag(""))}
    implement = {"name": "implement", "action": "agent", "command": bench.argv("--write", "a=A")}
    flows = merging(implement, look)
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"p": ticket_text("P")})
    with_files(bench, SHARED_FILES)
    bench.release("attacked")  # LOOK waits for no one here
    bench.start()
    assert workspaces(bench) == {"mode": "layered", "reason": None}
    bench.post("p")
    run = bench.wait_run("p#1")
    assert run["state"] == "merged", run
    seen = json.loads(bench.path("seen.json").read_text())
    assert seen.get("a") == "A\n", seen
    assert seen.get("src/f3.txt") == "orig 3\n", seen
    made = layers(bench)
    assert made, "no shared tree was made"
    # The run's commit stacks over its base: a difference holds only what changed.
    metas = [json.loads((layer / "meta").read_text()) for layer in made]
    assert any(meta["parent"] is not None for meta in metas), metas
    # Two stages in checkouts (then sync and merge), one tree written whole: no stage
    # writes the tree again.
    assert sum(meta["parent"] is None for meta in metas) == 1, metas
    stacked = next(layer for layer, meta in zip(made, metas, strict=True) if meta["parent"])
    files = [p for p in (stacked / "l").rglob("*") if p.is_file() and ".git" not in p.parts]
    assert [p.name for p in files] == ["a"], files
    assert not bench.worktree_of("R1").exists()  # merged: gone, layers and all


def test_a_file_rewritten_at_once_with_the_same_size_is_seen_changed(bench: Bench) -> None:
    # overlayfs keeps a copied-up file's inode number: an index dated in the future
    # (0.9.0's first cut) made the next stage's git take "bbbb" for the "aaaa" it had.
    first = {"name": "first", "action": "agent", "command": bench.argv("--write", "v.txt=aaaa")}
    second = {"name": "second", "action": "agent", "command": bench.argv("--write", "v.txt=bbbb")}
    flows = merging(first, second)
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"p": ticket_text("P")})
    bench.start()
    bench.post("p")
    run = bench.wait_run("p#1")
    assert run["state"] == "merged", run["reason"]
    assert git(bench.repo, "show", "main:v.txt") == "bbbb"


def test_an_agent_cannot_write_through_its_layer_into_the_shared_tree_or_another_run(
    bench: Bench,
) -> None:
    trees = trees_root(bench)
    evil = {"name": "implement", "action": "agent",
            "command": command(ATTACK, bench.flag(""), str(trees))}  # fmt: skip
    flows = merging(
        {"name": "implement", "action": "agent", "command": bench.argv("--write", "h=h")},
        {"name": "look", "action": "command", "command": command(LOOK, bench.flag(""))},
    )
    flows["evil"] = [evil]
    config = sloop_toml(bench.argv(), flows=flows, parallel=2)
    bench.setup(config, {"e": ticket_text("E", flow="evil"), "h": ticket_text("H")})
    with_files(bench, SHARED_FILES)
    bench.start()
    bench.post("e")
    bench.post("h")
    assert bench.wait_run("e#1")["state"] == "failed"
    assert bench.wait_run("h#1")["state"] == "merged"
    tried = json.loads(bench.path("attack.json").read_text())
    assert tried.pop("fs") == "overlay", tried
    assert tried, "the attack found nothing to try"
    assert all(result != "written" for result in tried.values()), tried
    # The other run's stage, started after the attack, saw the shared files as made.
    seen = json.loads(bench.path("seen.json").read_text())
    assert {k: v for k, v in seen.items() if k.startswith("src/")} == SHARED_FILES, seen
    assert "planted.txt" not in seen
    # Every shared copy of every file on disk is as git has it.
    for layer in layers(bench):
        for name, text in SHARED_FILES.items():
            path = layer / "l" / name
            if path.is_file():
                assert path.read_text() == text, path
                assert path.stat().st_mode & 0o777 != 0o777, path
    # main holds none of it.
    assert git(bench.repo, "show", "main:src/f1.txt") == "orig 1"
    # The failed run keeps a whole checkout to read, as its agent left it (copied
    # after it settled).
    kept = bench.worktree_of("R1")

    def copied() -> bool:
        names = ("planted.txt", ".git/HEAD", "src/f19.txt", "src/f2.txt")
        return all((kept / name).is_file() for name in names) and not copying(kept)

    wait_until(copied, timeout=60, interval=0.1)
    assert (kept / "planted.txt").read_text() == "planted\n"
    assert not (kept / "src" / "f0.txt").exists()
    assert (kept / "src" / "f2.txt").read_text().startswith("EVIL")
    assert (kept / ".git").is_dir()


def test_a_daemon_killed_while_it_makes_a_tree_leaves_nothing_half_made_in_use(
    bench: Bench,
) -> None:
    many = {f"d{n // 500}/f{n}.txt": f"{n}\n" for n in range(6000)}
    bench.setup(sloop_toml(bench.argv("--write", "a={run}")), {"p": ticket_text("P")})
    with_files(bench, many)
    bench.start()
    bench.post("p")
    root = trees_root(bench)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if root.is_dir() and any(p.name.startswith(".building-") for p in root.iterdir()):
            break
        time.sleep(0.002)
    else:
        pytest.fail("no tree was being made")
    assert bench.daemon is not None
    bench.daemon.kill9()
    half = [p for p in root.iterdir() if p.name.startswith(".building-")]
    assert half, "the kill came after the tree was made"
    bench.start()

    def merged() -> bool:
        return [s for (s,) in query(bench.state_dir, "SELECT state FROM tickets")] == ["merged"]

    wait_until(merged, timeout=120, interval=0.2)
    assert not any(p.exists() for p in half), "a half-made tree is still there"
    tracked = len(git(bench.repo, "ls-tree", "-r", "--name-only", "main~1").splitlines())
    whole = [p for p in layers(bench) if json.loads((p / "meta").read_text())["parent"] is None]
    for layer in whole:
        files = [p for p in (layer / "l").rglob("*") if p.is_file() and ".git" not in p.parts]
        assert len(files) == tracked, layer


def test_the_shared_trees_stay_within_tree_cache(bench: Bench) -> None:
    agent = bench.argv("--write", "{run}.txt={run}")
    config = sloop_toml(agent, extra="")
    config = config.replace("[agent]", '[repo]\ntree_cache = "1KiB"\n\n[agent]', 1)
    bench.setup(config, {f"t{n}": ticket_text(f"T{n}") for n in range(4)})
    bench.start()
    for n in range(4):
        bench.post(f"t{n}")
        assert bench.wait_run(f"t{n}#1")["state"] == "merged"
    # Each run's trees went as soon as no checkout held them: at most the last built.
    assert len(layers(bench)) <= 1, layers(bench)


def test_without_overlays_the_daemon_makes_whole_checkouts_and_says_why(bench: Bench) -> None:
    # A host without util-linux's unshare: the same PATH, minus that one program.
    tools = bench.root / "tools"
    tools.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        for entry in Path(folder).iterdir() if Path(folder).is_dir() else []:
            target = tools / entry.name
            if entry.name != "unshare" and not target.exists():
                target.symlink_to(entry)
    bench.env["PATH"] = str(tools)
    config = sloop_toml(bench.argv("--write", "a=A"))  # its children see that PATH too
    config = config.replace("[agent]\n", f"[agent]\nro_mounts = [{str(tools)!r}]\n", 1)
    bench.setup(config, {"p": ticket_text("P")})
    daemon = bench.start().daemon
    info = workspaces(bench)
    assert info["mode"] == "whole", info
    assert "unshare" in info["reason"], info
    assert "whole checkouts" in bench.log()
    assert daemon is not None
    doctor = subprocess.run(
        [sys.executable, "-m", "sloopctl", "--socket", str(daemon.socket), "doctor",
         "--json"],
        capture_output=True, text=True, env={**os.environ, "PATH": str(tools)},
    )  # fmt: skip
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["workspaces"]["status"] == "warn", checks["workspaces"]
    assert "unshare" in checks["workspaces"]["detail"], checks["workspaces"]
    bench.post("p")
    run = bench.wait_run("p#1")
    assert run["state"] == "merged", run["reason"]
    assert not trees_root(bench).exists() or not layers(bench)


def test_repo_workspaces_checkout_chooses_whole_checkouts(bench: Bench) -> None:
    config = sloop_toml(bench.argv("--write", "a=A"))
    config = config.replace("[agent]", '[repo]\nworkspaces = "checkout"\n\n[agent]', 1)
    bench.setup(config, {"p": ticket_text("P")})
    bench.start()
    assert workspaces(bench) == {"mode": "whole", "reason": 'repo.workspaces = "checkout"'}
    bench.post("p")
    assert bench.wait_run("p#1")["state"] == "merged"
    assert not layers(bench)


# Another instance's shared trees, looked for from a stage of this one.
PEEK = r"""
import json, os, sys
flags = sys.argv[1]
other = open(os.path.join(flags, "theirs")).read()  # not in argv: a named path is shown
found = {"exists": os.path.exists(other), "listed": None}
try:
    found["listed"] = os.listdir(other)
except OSError as exc:
    found["listed"] = exc.__class__.__name__
json.dump(found, open(os.path.join(flags, "peek.json"), "w"))
open("peeked.txt", "w").write("x\n")
"""


def test_two_daemons_on_one_host_keep_their_trees_apart(bench: Bench) -> None:
    other_root = short_tmpdir()
    other = Bench.create(other_root, make_repo(other_root))
    try:
        other.setup(sloop_toml(other.argv("--write", "o={run}")), {"o": ticket_text("O")})
        other.start()
        other.post("o")
        assert other.wait_run("o#1")["state"] == "merged"
        theirs = trees_root(other)
        assert layers(other), "the other daemon made no tree"
        bench.path("theirs").write_text(str(theirs))
        peek = {"name": "implement", "action": "agent", "commit": "auto",
                "command": command(PEEK, bench.flag(""))}  # fmt: skip
        bench.setup(sloop_toml(bench.argv(), flows=merging(peek)), {"p": ticket_text("P")})
        bench.start()
        bench.post("p")
        run = bench.wait_run("p#1")
        assert run["state"] == "merged", run["reason"]
        assert json.loads(bench.path("peek.json").read_text()) == {
            "exists": False,
            "listed": "FileNotFoundError",
        }
        assert trees_root(bench) != theirs
        assert layers(bench)
        # The auto-commit took the file the stage wrote, from its layer.
        assert git(bench.repo, "show", "main:peeked.txt") == "x"
    finally:
        other.stop()
        shutil.rmtree(other_root, ignore_errors=True)
