"""Issue 34, item 2: ``sync`` obeys none of the attributes an agent commits, in either mode.

On 0.8.0 a ``mode = "rebase"`` sync rebased in a checkout of the agent's commits, so
the ``.gitattributes`` the agent committed decided the merge: ``shared.txt
merge=union`` turned a real conflict with the operator's fix on ``main`` into both
lines, and the run merged them.  Each test runs the real daemon; the agent makes its
commits once ``main`` has moved under the run, as an operator's fix during a review.

The union, the ``text``/``eol`` and the global-driver tests fail on 0.8.0 (checked
with its ``sloopd/git/run_branches.py`` and ``sloopd/git/checkout_edits.py``); the merge
and the clean rebase are guards, which 0.8.0 passes too: merge mode was already
computed in the scratch repository, and the replay must keep rebase mode working.
"""

from __future__ import annotations

import subprocess
from typing import Any

from tests.support.agents import Bench, sloop_toml, stage_table, ticket_text
from tests.support.daemon import git

SHARED = "".join(f"line {n}\n" for n in range(1, 10))
AGENTS_LINE = "line 5, as the agent wrote it"
OPERATORS_LINE = "line 5, as the operator fixed it on main"


def agent(bench: Bench, script: str) -> list[str]:
    """An agent that waits for ``go`` (main has moved by then), then runs ``script`` in its
    checkout, on its first execution only (sent back, it has nothing more to say)."""
    flag = bench.flag("go")
    wait = f'while [ ! -e "{flag}" ]; do sleep 0.05; done; '
    return ["sh", "-c", wait + '[ "$SLOOP_ATTEMPT" = 1 ] || exit 0; set -e; ' + script]


# The agent's two commits, as in the issue: the attributes, then its own line 5.
UNION = (
    "echo 'shared.txt merge=union' > .gitattributes; "
    "git add .gitattributes; git commit -q -m 'attributes'; "
    f"sed 's/^line 5$/{AGENTS_LINE}/' shared.txt > shared.new; mv shared.new shared.txt; "
    "git commit -q -am 'line 5'"
)


def sync_flow(
    bench: Bench, mode: str, script: str, action: str = "agent", **sync: Any
) -> dict[str, Any]:
    return {
        "default": [
            {"name": "implement", "action": action, "command": agent(bench, script)},
            {"name": "sync", "action": "sync", "mode": mode, **sync},
            {"name": "merge", "action": "ff_only"},
        ]
    }


def run_moving_main(
    bench: Bench, flows: dict[str, Any], main_files: dict[str, str], **config: Any
) -> dict[str, Any]:
    """One ticket; ``main_files`` committed on main while its agent waits; its run."""
    bench.setup(sloop_toml(bench.argv(), flows=flows, **config), {"t": ticket_text("T")})
    bench.start()
    bench.post("t")
    bench.wait_stage_running("t#1", "implement")
    bench.commit_on_main(main_files, "the operator's fix")
    bench.release("go")
    return bench.wait_run("t#1")


def blob(bench: Bench, name: str) -> bytes:
    """A blob's bytes, as stored (no text mode between)."""
    done = subprocess.run(
        ["git", "-C", str(bench.repo), "cat-file", "blob", name], capture_output=True, check=True
    )
    return done.stdout


def fixed() -> dict[str, str]:
    return {"shared.txt": SHARED.replace("line 5\n", f"{OPERATORS_LINE}\n")}


def test_a_rebase_fails_the_conflict_the_agents_union_would_hide(bench: Bench) -> None:
    """The issue's scenario, with ``return_to``: the conflict fails ``sync`` naming the
    path, the agent is sent back, and main never gets both lines."""
    bench.commit_on_main({"shared.txt": SHARED}, "a file both sides edit")
    flows = sync_flow(bench, "rebase", UNION, return_to="implement", returns=1)
    run = run_moving_main(bench, flows, fixed())

    table = stage_table(run)
    assert table[:3] == [
        ("implement", 1, "passed"),
        ("sync", 1, "failed"),
        ("implement", 2, "passed"),  # sent back to the agent
    ], table
    first = next(r for r in run["stages"] if r["stage"] == "sync" and r["attempt"] == 1)
    assert "rebasing the branch onto main conflicts in: shared.txt" in first["reason"], first
    assert run["state"] == "needs_review", run  # the agent fixed nothing: the edge is spent
    assert git(bench.repo, "show", "main:shared.txt") == fixed()["shared.txt"].rstrip("\n")


def test_a_merge_fails_it_too(bench: Bench) -> None:
    """The same scenario with ``mode = "merge"``: the conflict fails ``sync`` too."""
    bench.commit_on_main({"shared.txt": SHARED}, "a file both sides edit")
    run = run_moving_main(bench, sync_flow(bench, "merge", UNION), fixed())

    assert run["state"] == "failed", run
    sync = next(r for r in run["stages"] if r["stage"] == "sync")
    assert "merging main into the branch conflicts in: shared.txt" in sync["reason"], sync
    assert git(bench.repo, "show", "main:shared.txt") == fixed()["shared.txt"].rstrip("\n")


def test_a_clean_rebase_still_lands_as_a_line(bench: Bench) -> None:
    """The agent's attributes, its edit far from the operator's, a file of its own: the
    rebase merges, one commit per agent commit on top of main, no merge commit."""
    bench.commit_on_main({"shared.txt": SHARED}, "a file both sides edit")
    script = UNION.replace("^line 5$", "^line 9$").replace(AGENTS_LINE, "line 9, by the agent")
    script += "; echo mine > mine.txt; git add mine.txt; git commit -q -m 'mine'"
    run = run_moving_main(bench, sync_flow(bench, "rebase", script), fixed())

    assert run["state"] == "merged", (run["reason"], run["stages"])
    moved = bench.rev("main~3")
    assert git(bench.repo, "log", "--format=%s", f"{moved}..main") == "mine\nline 5\nattributes"
    assert git(bench.repo, "rev-list", "--merges", f"{moved}..main") == ""
    shared = git(bench.repo, "show", "main:shared.txt")
    assert shared == SHARED.replace("line 5\n", f"{OPERATORS_LINE}\n").replace(
        "line 9\n", "line 9, by the agent\n"
    ).rstrip("\n")


def test_text_and_eol_attributes_rewrite_nothing_in_a_rebase(bench: Bench) -> None:
    """A command stage (a generator: no leftover check) commits a file with CRLF line
    ends, then ``* text eol=crlf`` (``-text`` for one file holding CRLF bytes), then more
    files, one of them edited by main too: main gets the blobs it stored, byte for
    byte, and the three-way result of the shared file, no line end converted.

    On 0.8.0 the rebase's checkout applied those attributes: the CRLF blob read back as
    a change, and git refused to rebase ("You have unstaged changes")."""
    bench.commit_on_main({"m.txt": "m1\nm2\nm3\n"}, "a file both sides edit")
    script = (
        r"printf 'one\r\ntwo\r\n' > crlf.txt; git add crlf.txt; git commit -q -m 'crlf'; "
        r"printf '* text eol=crlf\nraw.dat -text\n' > .gitattributes; "
        "git add .gitattributes; git commit -q -m 'attributes'; "
        r"printf 'one\ntwo\n' > plain.txt; printf 'one\r\ntwo\r\n' > raw.dat; "
        r"printf 'm1\nm2\nm3\nmade\n' > m.txt; git add plain.txt raw.dat m.txt; "
        "git commit -q -m 'files'"
    )
    flows = sync_flow(bench, "rebase", script, action="command")
    run = run_moving_main(bench, flows, {"m.txt": "main\nm1\nm2\nm3\n"})

    assert run["state"] == "merged", (run["reason"], run["stages"])
    implement = next(r for r in run["stages"] if r["stage"] == "implement")
    for name in ("crlf.txt", "plain.txt", "raw.dat", ".gitattributes"):
        assert bench.rev(f"main:{name}") == bench.rev(f"{implement['commit']}:{name}"), name
    assert blob(bench, "main:crlf.txt") == b"one\r\ntwo\r\n"
    assert blob(bench, "main:raw.dat") == b"one\r\ntwo\r\n"
    assert blob(bench, "main:plain.txt") == b"one\ntwo\n"
    assert blob(bench, "main:m.txt") == b"main\nm1\nm2\nm3\nmade\n"


def test_a_driver_in_the_daemon_users_global_config_is_not_run(bench: Bench) -> None:
    """The agent's ``.gitattributes`` names ``merge=x``, a driver the daemon user's global
    git config defines (here one that marks that it ran and appends a backdoor).  With
    ``sandbox = "none"`` 0.8.0's rebase ran on the host with that config in reach."""
    marker = bench.root / "driver-ran"
    home = bench.root / "daemon-home"
    (home / "git").mkdir(parents=True)
    driver = f"touch {marker}; git merge-file %A %O %B; printf BACKDOOR >> %A"
    (home / "git" / "config").write_text(f'[merge "x"]\n\tdriver = {driver}\n')
    bench.env["XDG_CONFIG_HOME"] = str(home)
    bench.env["GIT_CONFIG_GLOBAL"] = str(home / "git" / "config")
    bench.commit_on_main({"notes.txt": "notes\n"}, "a file both sides edit")
    script = (
        "echo 'notes.txt merge=x' > .gitattributes; git add .gitattributes; "
        "git commit -q -m attributes; echo agent >> notes.txt; git commit -q -am notes"
    )
    flows = sync_flow(bench, "rebase", script)
    run = run_moving_main(bench, flows, {"notes.txt": "main\nnotes\n"}, sandbox="none")

    assert run["state"] == "merged", (run["reason"], run["stages"])
    assert git(bench.repo, "show", "main:notes.txt") == "main\nnotes\nagent"
    assert not marker.exists(), "the daemon user's merge driver ran"
