"""The checks of this host's side: git, the run worktrees, the child process groups.

Worktrees come from git and are compared with the daemon's runs when it
answers; process groups come from the registry files the daemon keeps in its
state directory.  ``tomllib`` is imported only by the check that reads
sloop.toml.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from sloopctl.client import ClientError
from sloopctl.diagnosis.facts import Doctor, rows
from sloopctl.diagnosis.host import (
    CHECKOUTS_DIR,
    GROUPS_DIR,
    GitProblem,
    describe_group,
    git,
    live_pids,
    marked_processes,
    read_group_records,
)
from sloopctl.diagnosis.report import (
    NOT_REACHABLE,
    START,
    Check,
    Findings,
    first_line,
    plural,
)

GC_FIX: Final = "sloopctl gc"


def _resolved(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


def main_branch(repo: Path, found: Findings) -> str | None:
    """``[repo] main`` of the repository's sloop.toml (default "main"); None if unreadable."""
    import tomllib

    path = repo / "sloop.toml"
    fix = "fix sloop.toml: the daemon refuses to start with it (and ignores it on SIGHUP)"
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "main"
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        found.add("fail", f"{path} cannot be read as TOML: {exc}", fix)
        return None
    section = document.get("repo", {})
    main = section.get("main", "main") if isinstance(section, dict) else None
    if not isinstance(main, str) or not main.strip():
        found.add("fail", f"{path}: [repo] main must be a non-empty string", fix)
        return None
    return main


def check_git(d: Doctor) -> Check:
    name = "git"
    try:
        version = git(None, "--version")
    except OSError as exc:
        return Check(name, "fail", f"git cannot be run: {exc}", "install git and put it on PATH")
    if d.elsewhere:
        return Check(name, "warn", d.elsewhere)
    if d.repo is None:
        return Check(
            name,
            "fail",
            "not inside a git repository, and no daemon answered to name one",
            "run 'sloopctl doctor' in the repository",
        )
    found = Findings()
    facts = [first_line(version.stdout) or "git present"]
    main = main_branch(d.repo, found)
    if main is not None:
        tip = git(d.repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{main}^{{commit}}")
        if tip.returncode == 0:
            facts.append(f"main branch '{main}' at {tip.stdout.strip()[:12]}")
        else:
            found.add(
                "fail",
                f"the main branch '{main}' ([repo] main in sloop.toml) does not exist in {d.repo}",
                f"create it ('git branch {main} <commit>') or set [repo] main in sloop.toml",
            )
    try:
        facts.append(plural(len(d.listing()), "worktree") + " listed")
    except GitProblem as exc:
        found.add("fail", str(exc), f"run 'git -C {d.repo} worktree list' to see why")
    facts.append(_fsck(d.repo, found) if d.options.full else "'--full' runs git fsck")
    return found.result(name, ", ".join(facts))


def _fsck(repo: Path, found: Findings) -> str:
    done = git(repo, "fsck", "--connectivity-only", "--no-progress", timeout=None)
    if done.returncode != 0:
        found.add(
            "fail",
            f"git fsck --connectivity-only exited {done.returncode}: "
            f"{first_line(done.stderr) or first_line(done.stdout)}",
            "repair the repository from a healthy clone or a backup (git fsck lists the damage)",
        )
        return "git fsck failed"
    return "git fsck --connectivity-only clean"


def _checkouts(root: Path) -> tuple[set[Path], set[Path]]:
    """(run checkouts, other directories) under ``<state dir>/checkouts``."""
    try:
        directories = {_resolved(p) for p in root.iterdir() if p.is_dir()}
    except OSError:
        directories = set()
    live = {p for p in directories if (p / ".git").is_dir() or _layered(p)}
    return live, directories - live


def _layered(path: Path) -> bool:
    """A copy-on-write checkout (0.9.0): an empty folder the stage's overlay is mounted
    on, its layers in ``<state dir>/runs/<run>/layers``."""
    layers = path.parent.parent / "runs" / path.name / "layers"
    try:
        return layers.is_dir() and next(path.iterdir(), None) is None
    except OSError:
        return False


def check_worktrees(d: Doctor) -> Check:
    """Each run's checkout (a repository of its own) against what the daemon says of its run."""
    name = "worktrees"
    if d.state_dir is None:
        return Check(name, "warn", d.elsewhere or "skipped: no repository, so no state directory")
    root = _resolved(d.state_dir / CHECKOUTS_DIR)
    live, strays = _checkouts(root)
    found = Findings()
    for path in sorted(strays):
        found.add("warn", f"{path} is not a run checkout", f"inspect it, then rm -r {path}")
    if not d.up:
        if live:  # with the daemon down no run is in flight: only these are unchecked
            found.add(
                "warn",
                f"{NOT_REACHABLE}, so {plural(len(live), 'run checkout')} not compared with runs",
            )
        return found.result(name, "" if live else "no run checkouts")
    try:
        summary = _compare_with_runs(d, root, live, found)
    except ClientError as exc:
        return Check(name, "warn", f"the daemon stopped answering: {exc.message}")
    return found.result(name, summary)


def _compare_with_runs(d: Doctor, root: Path, live: set[Path], found: Findings) -> str:
    in_flight = {str(r.get("id")): r for r in rows(d.dashboard.get("runs"))}
    counts: Counter[str] = Counter()
    for path in sorted(live):
        run = in_flight.get(path.name) or d.run(path.name)
        counts[_checkout_of_run(path, run, found)] += 1
    _runs_without_checkout(d, root, in_flight.values(), live, found, counts)
    if not live:
        preparing = counts["being prepared"]
        return "no run checkouts" + (
            f" ({plural(preparing, 'run')} being prepared)" if preparing else ""
        )
    parts = [f"{n} {what}" for what, n in sorted(counts.items()) if what != "problem"]
    kept = " (sloopctl gc removes those)" if counts["kept for inspection"] else ""
    return f"{plural(len(live), 'run checkout')}: {', '.join(parts) or 'none healthy'}{kept}"


def _same(recorded: Any, path: Path) -> bool:
    return isinstance(recorded, str) and _resolved(recorded) == path


def _checkout_of_run(path: Path, run: dict[str, Any] | None, found: Findings) -> str:
    """Sort one checkout under <state dir>/checkouts by what the daemon says of its run."""
    remove = f"rm -r {path}"
    if run is None:
        found.add("warn", f"{path}: the daemon knows no run {path.name}", remove)
        return "problem"
    if not run.get("terminal"):
        return "in flight"
    state, run_id = run.get("state"), run.get("id")
    if not _same(run.get("worktree"), path):
        found.add(
            "warn",
            f"{run_id} is {state} and its checkout was removed, yet one is at {path}",
            remove,
        )
        return "problem"
    if state == "merged":
        found.add("warn", f"{run_id} is merged but its checkout is still at {path}", GC_FIX)
        return "problem"
    return "kept for inspection"


def _runs_without_checkout(
    d: Doctor,
    root: Path,
    runs: Iterable[dict[str, Any]],
    listed: set[Path],
    found: Findings,
    counts: Counter[str],
) -> None:
    """Runs in flight whose checkout is missing, asked again before blaming them."""
    suspects = []
    for run in runs:
        where = run.get("worktree")
        if where is None and run.get("state") == "claimed":
            counts["being prepared"] += 1
        elif not isinstance(where, str) or _resolved(where) not in listed:
            suspects.append(str(run.get("id")))
    if not suspects:
        return
    # A run may have settled, or got its checkout, since the dashboard was read.
    relisted, _ = _checkouts(root)
    for run_id in suspects:
        fresh = d.run(run_id)
        if fresh is None or fresh.get("terminal"):
            continue
        where = fresh.get("worktree")
        if where is None and fresh.get("state") == "claimed":
            continue
        if isinstance(where, str) and _resolved(where) in relisted:
            continue
        found.add(
            "fail",
            f"{run_id} is {fresh.get('state')} but has no checkout"
            + (f" at {where}" if isinstance(where, str) else ""),
            f"sloopctl abort {run_id}, then 'sloopctl run {fresh.get('ticket')}' for a new attempt",
        )


def check_groups(d: Doctor) -> Check:
    name = "groups"
    if d.state_dir is None:
        return Check(name, "warn", d.elsewhere or "skipped: no repository, so no state directory")
    records = read_group_records(d.state_dir / GROUPS_DIR)
    if not records:
        return Check(name, "ok", "no child process groups recorded")
    marked = marked_processes({r.marker for r in records})
    live = {r.path: live_pids(r, marked) for r in records}
    running = "; ".join(describe_group(r, live[r.path]) for r in records if live[r.path])
    pids = sorted({pid for found in live.values() for pid in found})
    if d.up and d.daemon.get("store") == "ok":
        count = sum(1 for found in live.values() if found)
        return Check(
            name, "ok", f"{len(records)} recorded, {count} live" + (f": {running}" if pids else "")
        )
    if not pids:
        return Check(
            name,
            "ok",
            f"{len(records)} records of a stopped daemon, no live process "
            "(its next start clears them)",
        )
    return _leftovers(d, running, pids)


def _leftovers(d: Doctor, running: str, pids: list[int]) -> Check:
    """Recorded processes alive while no daemon that manages them runs."""
    kill = "kill " + " ".join(str(p) for p in pids)
    if d.up:  # a daemon refusing its store serves only show: it never reaped these
        return Check(
            "groups",
            "fail",
            f"processes of an earlier daemon still run, and this one (serving only show) "
            f"does not stop them: {running}",
            f"fix the store (see the store check) and restart the daemon; or {kill}",
        )
    daemon_pid = d.live_daemon_pid()
    if daemon_pid is not None:
        return Check(
            "groups",
            "warn",
            f"the daemon (pid {daemon_pid}) does not answer; its children still run: {running}",
            f"restart it: 'systemctl restart sloopd@<name>', or 'kill {daemon_pid}' then {START}",
        )
    return Check(
        "groups",
        "fail",
        f"leftover processes of a stopped daemon still run: {running}",
        f"start the daemon (it kills leftovers): sloopctl daemon; or {kill}",
    )
