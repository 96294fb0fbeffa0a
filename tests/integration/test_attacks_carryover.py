"""Issue 22: what one stage leaves behind acts on the next, through the real daemon.

On 0.7.0 every stage of a run worked in the same checkout and the same HOME, and
git, CLIs and bubblewrap all acted on what they found there; since 0.8.0 each
execution starts in a checkout and a HOME the daemon made from a commit.  Each test is one attack
as an implementer would try it (``tests/support/carryover.py``'s ``ATTACKER``),
with honest reviewers and honest test stages after it, and asserts what an
operator cares about afterwards: main holds no backdoor, only the seat itself
decided its verdict, nothing appeared in the operator's repository, another
instance's files never reached an agent, the brief names a path the agent sees.

Each failed on 0.7.0 (reproduced before the fix).  The committed Claude hook is
closed by the claude preset's flags (``--setting-sources ''``, ``--strict-mcp-config``),
which the seat here runs with.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import carryover as co
from tests.support.agent_clis import cli
from tests.support.agents import BENCH_VAR, Bench, sloop_toml, ticket_text, toml_value
from tests.support.daemon import git
from tests.support.standins.anthropic import AnthropicStandIn, verdict_script

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

Flows = dict[str, list[dict[str, Any]]]
SHARED = "".join(f"line {n} of a file both sides edit\n" for n in range(1, 13))


@pytest.fixture(autouse=True)
def scripts(bench: Bench) -> None:
    co.install(bench)


def merging(*stages: dict[str, Any]) -> Flows:
    """The default flow: the given stages, then sync and ff_only."""
    tail = [{"name": "sync", "action": "sync"}, {"name": "merge", "action": "ff_only"}]
    return {"default": [*stages, *tail]}


def run_ticket(bench: Bench, flows: Flows, passed: tuple[str, ...] = ()) -> dict[str, Any]:
    """Set the repository up with ``flows`` (the daemon's ``passed`` variables named in
    ``agent.env``), post one ticket, wait for its run to settle."""
    config = sloop_toml(bench.argv(), flows=flows)
    if passed:
        names = toml_value([*passed, BENCH_VAR])
        mounts = toml_value([bench.flag("")])
        config = config.replace("[agent]\n", f"[agent]\nenv = {names}\nrw_mounts = {mounts}\n")
    bench.setup(config, {"work": ticket_text("Work")})
    bench.start()
    bench.post("work")
    return bench.wait_run("work#1", timeout=90.0)


def panel(bench: Bench, *seats: str) -> dict[str, Any]:
    """A review stage whose seats are honest reviewers, all of which must pass."""
    reviewers = [{"target": s, "command": co.reviewer(bench, f"seat-{s}")} for s in seats]
    return {"name": "review", "action": "agent", "result_check": "panel", "reviewers": reviewers}


# --- 1. the implementer decides its own review --------------------------------------


@pytest.mark.parametrize(
    "where",
    [
        pytest.param("fsmonitor", id="core.fsmonitor-in-.git/config"),
        pytest.param("diff-external", id="diff.external-in-HOME/.gitconfig"),
        pytest.param("xdg", id="core.fsmonitor-in-HOME/.config/git/config"),
    ],
)
def test_the_implementer_cannot_cast_a_seats_verdict(bench: Bench, where: str) -> None:
    """The implementer commits a backdoor and leaves a program git will start.

    It writes the program into ``.git/`` and ``$HOME`` and names it as
    ``core.fsmonitor`` (the checkout's ``.git/config``, or HOME's
    ``.config/git/config``) or ``diff.external`` (HOME's ``.gitconfig``, the run's
    HOME being shared by all its stages).  When an honest seat runs ``git status``
    or ``git diff``, git starts the program as the seat's child, with the seat's
    ``SLOOP_TOKEN``: it reports ``pass`` for the seat before the seat can say
    ``fail``, and the seat's own verdict is refused as a second one.
    """
    implement = {"name": "implement", "action": "agent", "command": co.attacker(bench, where)}
    run = run_ticket(bench, merging(implement, panel(bench, "a", "b")))

    rows, rigged = co.stages(run), co.rigged_votes(bench, where)
    assert not co.has_marker(bench.repo, "main"), (rows, rigged)
    assert run["state"] == "failed", rows
    # No verdict counted that its seat did not send: each seat that sat decided its own.
    review = next(r for r in run["stages"] if r["stage"] == "review")
    counted = {s["target"]: s["verdict"] for s in review["reviewers"]}
    for seat in ("a", "b"):
        seen = co.reported(bench, f"seat-{seat}")
        if seen is not None:
            assert seen["answer"].get("ok") is True, (seat, seen, rigged)
            assert counted[seat] == seen["verdict"] == "fail", (seat, seen, review)
    assert all(vote.get("ok") is not True for vote in rigged), rigged


def test_a_committed_claude_hook_cannot_cast_a_seats_verdict(bench: Bench) -> None:
    """The implementer commits the backdoor and a project ``.claude/settings.json``.

    Its ``SessionStart`` hook is the vote-casting program: the real Claude Code,
    started as an honest seat in the checkout, runs it before its first turn, and
    the seat's own ``sloopctl verdict fail`` comes second.
    """
    implement = {
        "name": "implement",
        "action": "agent",
        "command": co.attacker(bench, "claude-hook"),
    }
    seat = {"target": "claude", "command": ["sh", "-c", co.CLAUDE_SCRIPT, str(cli("claude"))]}
    review = {"name": "review", "action": "agent", "result_check": "panel", "reviewers": [seat]}
    with AnthropicStandIn(scripts=[verdict_script("fail", "a backdoor in backdoor.txt")]) as api:
        bench.env.update(co.claude_env(api.url))
        run = run_ticket(bench, merging(implement, review), tuple(co.claude_env(api.url)))
        asked = api.paths()

    rows, rigged = co.stages(run), co.rigged_votes(bench, "claude-hook")
    assert not co.has_marker(bench.repo, "main"), (rows, rigged, asked)
    assert run["state"] == "failed", rows
    assert all(vote.get("ok") is not True for vote in rigged), rigged


# --- 2. what is reviewed and tested is not what merges ------------------------------


def test_a_replaced_commit_is_not_what_reviewers_and_tests_see(bench: Bench) -> None:
    """The implementer commits X (the backdoor) and a twin Y with a harmless tree.

    ``git replace X Y`` and ``reset --hard``: every git in the checkout, the
    daemon's reset to the pinned commit included, shows Y's files for X's sha,
    while the bring-back (upload-pack ignores replace refs) fetches X.  The honest
    test stage and reviewer both look at Y and pass; ``ff_only`` merges X.
    """
    flows = merging(
        {"name": "implement", "action": "agent", "command": co.attacker(bench, "replace")},
        {"name": "test", "action": "command", "command": co.checker(bench)},
        panel(bench, "a"),
    )
    run = run_ticket(bench, flows)

    made, seen = co.reported(bench, "replace"), co.reported(bench, "seat-a")
    detail = (co.stages(run), made, seen, co.reported(bench, "checker"))
    assert not co.has_marker(bench.repo, "main"), detail
    assert run["state"] == "failed", detail


def test_a_skip_worktree_file_is_not_what_the_test_stage_sees(bench: Bench) -> None:
    """The implementer commits the backdoor, then puts a harmless file on disk.

    ``update-index --skip-worktree`` makes git (the daemon's uncommitted check,
    ``reset --hard``) leave that file alone, so the next ``command`` stage, which
    starts on whatever files the implementer left, tests the harmless file,
    passes, and the committed backdoor merges.
    """
    flows = merging(
        {"name": "implement", "action": "agent", "command": co.attacker(bench, "skip-worktree")},
        {"name": "test", "action": "command", "command": co.checker(bench)},
    )
    run = run_ticket(bench, flows)

    detail = (co.stages(run), co.reported(bench, "checker"))
    assert not co.has_marker(bench.repo, "main"), detail
    assert run["state"] == "failed", detail


# --- 3. sync runs the implementer's merge driver ------------------------------------


def test_sync_does_not_run_the_implementers_merge_driver(bench: Bench) -> None:
    """The implementer commits a clean change and names a merge driver in the checkout.

    ``merge.x.driver`` in ``.git/config`` appends the backdoor to what it merges,
    ``.git/info/attributes`` says ``* merge=x``.  The reviewer passes the clean
    commit; main moves meanwhile on the same file, so ``sync`` merges that file
    in the checkout through the driver, and ``ff_only`` gives main content that
    neither the reviewed commit nor main had.
    """
    bench.commit_on_main({"shared.txt": SHARED}, "a file both sides edit")
    review = {
        "name": "review",
        "action": "agent",
        "result_check": "reported",
        "command": co.reviewer(bench, "reviewer", bench.flag("go")),
    }
    flows = merging(
        {"name": "implement", "action": "agent", "command": co.attacker(bench, "merge-driver")},
        review,
    )
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"work": ticket_text("Work")})
    bench.start()
    bench.post("work")
    bench.wait_stage_running("work#1", "review")
    bench.commit_on_main({"shared.txt": SHARED.replace("line 12 ", "line twelve ")})
    bench.release("go")
    run = bench.wait_run("work#1")

    assert co.report(bench, "reviewer")["verdict"] == "pass"  # the commit it saw was clean
    detail = (co.stages(run), git(bench.repo, "show", "main:shared.txt"))
    assert not co.has_marker(bench.repo, "main"), detail


# --- 4. mount points follow the agent's symlinks ------------------------------------


def files_of(repo: Path) -> set[str]:
    """Every path of the operator's repository (its .git too), relative."""
    return {
        os.path.relpath(os.path.join(root, name), repo)
        for root, dirs, files in os.walk(repo)
        for name in [*dirs, *files]
    }


def test_a_login_mount_point_does_not_follow_the_agents_symlink(bench: Bench) -> None:
    """The login file is mounted inside the HOME the agent writes.

    ``~/.claude/.credentials.json`` (the claude preset's login) is bound at
    ``/sloop/home/.claude/.credentials.json``.  The agent moves ``.claude``
    aside and puts a symlink to ``/oldroot<the operator's repository>`` there
    (the host path is in its own alternates).  At the next stage's start
    bubblewrap creates the mount point while the host is still at ``/oldroot``:
    through the link, in the operator's working tree.
    """
    folder = bench.root / "bin"
    folder.mkdir()
    (folder / "claude").write_text(co.FAKE_CLAUDE)
    (folder / "claude").chmod(0o755)
    home = bench.root / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text('{"login": "operator"}')
    bench.env.update(PATH=f"{folder}:/usr/bin:/bin", HOME=str(home))
    config = (
        f'[agent]\npreset = "claude"\nenv = {toml_value([BENCH_VAR])}\n'
        f"ro_mounts = {toml_value([str(folder)])}\n"
        f"rw_mounts = {toml_value([bench.flag('')])}\n"
    )
    for name in ("implement", "again"):
        config += f'\n[[flows.default.stages]]\nname = "{name}"\naction = "agent"\n'
    bench.setup(config, {"work": ticket_text("Work")})
    before = files_of(bench.repo)
    bench.start()
    bench.post("work")
    run = bench.wait_run("work#1")

    linked = bench.path("claude-implement").read_text()  # ": 0": the link was made
    appeared = {p for p in files_of(bench.repo) - before if p.split("/")[0] != ".git"}
    assert appeared == set(), (appeared, linked, co.stages(run), run["reason"])
    assert json.loads((home / ".claude" / ".credentials.json").read_text()) == {"login": "operator"}


# --- 5. another instance's state ------------------------------------------------------


@pytest.fixture
def other_instance() -> Iterator[tuple[Path, str]]:
    """Another instance's state under /srv (deploy.md's layout): a store and a prompt."""
    made_srv = not os.path.isdir("/srv")
    try:
        os.makedirs("/srv", exist_ok=True)
        root = Path(f"/srv/sloop-test-{secrets.token_hex(6)}")
        (root / "state" / "runs" / "R1").mkdir(parents=True)
    except OSError as exc:
        pytest.skip(f"cannot create a directory under /srv here: {exc}")
    secret = f"other-instance-{secrets.token_hex(8)}"
    (root / "state" / "sloop.db").write_text(f"store of {secret}\n")
    (root / "state" / "runs" / "R1" / "prompt-implement-1.md").write_text(f"prompt {secret}\n")
    try:
        yield root, secret
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if made_srv:
            os.rmdir("/srv")


def test_an_agent_cannot_read_another_instances_state(
    bench: Bench, other_instance: tuple[Path, str]
) -> None:
    """An agent told where another instance keeps its store and prompts tries to read them.

    The paths come through the ticket (the prompt), not the command line (paths a
    command line names are shown on purpose); the agent also walks ``/srv``.
    """
    root, secret = other_instance
    told = f"{root}/state/sloop.db {root}/state/runs/R1/prompt-implement-1.md {root}"
    flows: Flows = {"default": [{"name": "implement", "action": "agent"}]}
    bench.setup(
        sloop_toml(co.attacker(bench, "peek"), flows=flows),
        {"work": ticket_text("Work", f"Look at {told} please.")},
    )
    bench.start()
    bench.post("work")
    bench.wait_run("work#1")

    seen = co.report(bench, "peek")
    assert f"{root}/state/sloop.db" in seen["seen"], seen  # it tried the path it was told
    assert secret not in json.dumps(seen), seen
    assert root.name not in (seen["srv"] or []), seen
    for path in bench.path("").iterdir():
        assert secret not in path.read_text(errors="replace"), path


# --- 6. the brief names a path the agent sees ---------------------------------------


def test_the_brief_names_the_checkout_the_agent_sees(bench: Bench) -> None:
    """``brief`` answers the run's worktree: inside the sandbox that is ``/sloop/work``.

    An agent that trusts the brief (``cd "$(sloopctl brief | jq -r .worktree)"``)
    must land in its checkout, not on a host path that does not exist there.
    """
    flows: Flows = {"default": [{"name": "implement", "action": "agent"}]}
    bench.setup(sloop_toml(co.attacker(bench, "brief"), flows=flows), {"work": ticket_text("W")})
    bench.start()
    bench.post("work")
    bench.wait_run("work#1")

    seen = co.report(bench, "brief")
    assert seen["answer"].get("ok") is True, seen
    assert seen["worktree"] == "/sloop/work" == seen["cwd"], seen
    assert seen["exists"] is True, seen
