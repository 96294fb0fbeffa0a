"""The checks of what the daemon says: socket, version, store, clock.

The store is vouched for by the daemon when it answers, and checked by
``sloopd store check`` in a subprocess (read-only, under the store's lock)
when it does not.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from sloopctl.client import FIX as START_FIX
from sloopctl.diagnosis.facts import Doctor
from sloopctl.diagnosis.report import (
    NOT_REACHABLE,
    START,
    Check,
    Findings,
    Status,
    first_line,
)
from sloopctl.layout import span
from sloopd.wire import api

STORE_CHECK_TIMEOUT_S: Final = 300.0  # an integrity check reads the whole store
CLOCK_SKEW_WARN_MS: Final = 5_000
SANE_CLOCK_MS: Final = 1_577_836_800_000  # 2020-01-01T00:00Z: anything earlier is bogus


def check_socket(d: Doctor) -> Check:
    name = "socket"
    found = d.probe
    if found.dashboard is not None and found.endpoint is not None:
        pid = d.daemon.get("pid")
        return Check(
            name,
            "ok",
            f"{found.endpoint.socket} answers show in {found.elapsed_ms} ms "
            f"(sloopd pid {pid}; socket from {found.endpoint.source})",
        )
    detail = found.problem or "no answer"
    fix = found.fix or START_FIX
    pid = d.live_daemon_pid()
    if pid is not None:
        detail += f"; {d.info.path if d.info else 'daemon.json'} names pid {pid}, which is alive"
        if found.fix is None:  # a hung daemon, not a permission or protocol problem
            fix = f"restart it: 'systemctl restart sloopd@<name>', or 'kill {pid}' then {START}"
    elif d.info is not None and d.info.pid is not None:
        detail += (
            f"; {d.info.path} names pid {d.info.pid}, which is not running "
            "(the daemon did not stop cleanly)"
        )
    return Check(name, "fail", detail, fix)


def check_version(d: Doctor) -> Check:
    name = "version"
    if not d.up:
        return Check(name, "warn", NOT_REACHABLE)
    version, protocol = d.daemon.get("version"), d.daemon.get("protocol")
    mine = f"this sloopctl {api.SOFTWARE_VERSION}, protocol v{api.PROTOCOL_VERSION}"
    found = f"sloopd {version}, protocol v{protocol}"
    if version == api.SOFTWARE_VERSION and protocol == api.PROTOCOL_VERSION:
        return Check(name, "ok", f"{found} (same as {mine})")
    return Check(
        name,
        "warn",
        f"{found}, but {mine}",
        "install the same release of sloopd and sloopctl, then restart the daemon",
    )


def check_sandbox(d: Doctor) -> Check:
    """Whether agents run sandboxed: ``sandbox = "none"`` and a missing bwrap both fail."""
    name = "sandbox"
    if not d.up:
        return Check(name, "warn", NOT_REACHABLE)
    info = d.daemon.get("sandbox")
    if not isinstance(info, dict):
        return Check(name, "warn", "the daemon does not say how it runs agents (before 0.5.0)")
    if info.get("mode") == "none":
        return Check(
            name,
            "fail",
            'sandbox = "none": agents run unsandboxed, with this daemon\'s authority',
            'remove sandbox = "none" from sloop.toml (install bubblewrap first), then reload',
        )
    if not info.get("available"):
        return Check(
            name,
            "fail",
            str(info.get("warning") or "bubblewrap cannot start a sandbox"),
            "install bubblewrap and allow user namespaces (docs/deploy.md)",
        )
    return Check(name, "ok", "every agent and command runs in a bubblewrap sandbox")


def check_workspaces(d: Doctor) -> Check:
    """(0.9.0) Whether stages start in copy-on-write checkouts: a host without them
    falls back to whole checkouts, whose start grows with the tree (a warning)."""
    name = "workspaces"
    if not d.up:
        return Check(name, "warn", NOT_REACHABLE)
    sandbox = d.daemon.get("sandbox")
    info = sandbox.get("workspaces") if isinstance(sandbox, dict) else None
    if not isinstance(info, dict):
        return Check(name, "ok", "the daemon makes a whole checkout per stage (before 0.9.0)")
    if info.get("mode") == "layered":
        return Check(name, "ok", "stages start in copy-on-write checkouts over shared trees")
    reason = str(info.get("reason") or "no reason given")
    return Check(
        name,
        "warn",
        f"stages start in whole checkouts, each writing the whole tree: {reason}",
        "allow user namespaces and overlay mounts in them (util-linux's unshare and "
        'mount, kernel 5.11 or later; docs/deploy.md), or set repo.workspaces = "checkout" '
        "to choose whole checkouts; restart the daemon",
    )


def check_hardening(d: Doctor) -> Check:
    """(0.9.0) Whether the unit's file-system hardening is in force: systemd that cannot
    set up the service's mount namespace (PID 1 of a container without CAP_SYS_ADMIN)
    starts it without, and says so only at debug level."""
    name = "hardening"
    if not d.up:
        return Check(name, "warn", NOT_REACHABLE)
    info = d.daemon.get("service")
    if not isinstance(info, dict) or info.get("manager") != "systemd":
        return Check(name, "ok", "not started by systemd: no unit hardening to check")
    writable = info.get("writable")
    if not isinstance(writable, list):
        return Check(name, "warn", "the daemon could not read its mount table")
    if not writable:
        private = "; /tmp private" if info.get("private_tmp") else ""
        return Check(
            name, "ok", f"the unit's hardening is in force: /usr and /etc read-only{private}"
        )
    return Check(
        name,
        "warn",
        f"systemd started the daemon but {' and '.join(map(str, writable))} "
        "writable: the unit's ProtectSystem= (and its other mount hardening) is not in force",
        "in a container, give systemd CAP_SYS_ADMIN (podman run --systemd=always --cap-add "
        "SYS_ADMIN); elsewhere check the unit with 'systemctl cat' (docs/deploy.md); if "
        "you removed the hardening on purpose, ignore this",
    )


def check_clis(d: Doctor) -> Check:
    """Whether each configured preset's CLI resolves inside the sandbox, as the daemon
    found at its start (or last reload): one it hides fails every run with exit 127;
    and (0.9.0) whether main holds a file a preset refuses to start its CLI beside."""
    name = "clis"
    if not d.up:
        return Check(name, "warn", NOT_REACHABLE)
    info = d.daemon.get("sandbox")
    rows = info.get("clis") if isinstance(info, dict) else None
    if not isinstance(rows, list):
        return Check(name, "warn", "the daemon does not say whether its agents' CLIs are there")
    if not rows:
        return Check(name, "ok", "every configured preset's CLI resolves inside the sandbox")
    found = Findings()
    for row in rows:
        if not isinstance(row, dict):
            continue
        if row.get("file"):
            # main holds a file the preset refuses to start beside (0.9.0): every run fails.
            found.add(
                "fail",
                f"preset {row.get('preset')!r}: {row.get('problem')}",
                f"remove {row.get('file')} from main, then reload",
            )
            continue
        # A CLI found on the daemon's PATH but hidden is a configuration to fix; one
        # found nowhere may simply be a preset this host does not run yet.
        status: Status = "fail" if row.get("path") else "warn"
        found.add(
            status,
            f"preset {row.get('preset')!r}: {row.get('problem')}",
            "add the folder named to agent.ro_mounts in sloop.toml, then reload"
            if status == "fail"
            else f"install {row.get('cli')} for the daemon's user, then restart the daemon",
        )
    return found.result(name, "")


def check_executor(d: Doctor) -> Check:
    """Whether the Ray cluster stages are placed on is reachable (docs/scale-out.md);
    while it is not, the gate is closed and no run is claimed."""
    name = "executor"
    if not d.up:
        return Check(name, "warn", NOT_REACHABLE)
    info = d.daemon.get("executor")
    if not isinstance(info, dict) or info.get("address") is None:
        return Check(name, "ok", "every stage runs on this host")
    address = info.get("address")
    if info.get("reachable") is None:
        return Check(
            name, "warn", f"the daemon is still connecting to the Ray cluster at {address}"
        )
    if not info.get("reachable"):
        return Check(
            name,
            "fail",
            f"the Ray cluster at {address} cannot be reached: {info.get('reason')}",
            "start the cluster, or check [executor] address and RAY_AUTH_TOKEN in the "
            "daemon's environment (docs/scale-out.md); the gate reopens by itself",
        )
    return Check(name, "ok", f"stages run on the Ray cluster at {address}")


def check_store(d: Doctor) -> Check:
    name = "store"
    if d.up:
        return _store_from_daemon(d)
    if d.state_dir is None:
        return Check(name, "warn", "skipped: no repository, so no state directory to check")
    if not d.state_dir.is_dir():
        return Check(
            name,
            "warn",
            f"no state directory at {d.state_dir}: no daemon has run for this repository",
            START_FIX,
        )
    return store_check_subprocess(d.state_dir)


def _store_from_daemon(d: Doctor) -> Check:
    store, schema = d.daemon.get("store"), d.daemon.get("schema_version")
    fault = d.daemon.get("store_fault")
    if store == "ok" and isinstance(fault, dict):
        since = fault.get("since_ms")
        when = f" since {_utc(since)}" if isinstance(since, int) else ""
        fix = {
            "full": f"free space on the filesystem of {d.daemon.get('state_dir')}; "
            "the daemon retries by itself and records what it could not store",
            "busy": "find the process holding the store's write lock (a backup, a sqlite3 "
            "shell) and end it",
        }.get(str(fault.get("reason")), "see the daemon's log")
        return Check(
            "store",
            "fail",
            f"the daemon cannot write its store{when} ({fault.get('failures')} failed writes): "
            f"{fault.get('detail')}",
            fix,
        )
    if store == "ok":
        return Check(
            "store",
            "ok",
            f"open in the daemon (schema version {schema}); a full integrity check "
            "needs the daemon stopped: sloopd store check",
        )
    reason = d.daemon.get("reason")
    words = str(reason) if reason else f"the daemon reports the store as {store!r}"
    # The daemon's reasons end in their fix ("...; upgrade sloopd or restore a backup ...").
    problem, _, fix = words.rpartition("; ")
    return Check(
        "store",
        "fail",
        f"refused by the daemon: {problem or words}",
        fix if problem else "see the daemon's log",
    )


def store_check_subprocess(state_dir: Path) -> Check:
    """``sloopd store check`` in a subprocess: read-only, under the store's lock."""
    name = "store"
    argv = [sys.executable, "-m", "sloopd", "store", "check", "--state-dir", str(state_dir)]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            check=False,
            timeout=STORE_CHECK_TIMEOUT_S,
            cwd=state_dir,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name, "fail", f"cannot run sloopd store check: {exc}", "run it by hand")
    if done.returncode == 0:
        return Check(name, "ok", f"sloopd store check: {first_line(done.stdout)}")
    problems = [
        ln.removeprefix("problem: ").strip()
        for ln in done.stderr.splitlines()
        if ln.startswith("problem: ")
    ]
    if problems and all(p.startswith("no store at ") for p in problems):
        return Check(name, "warn", f"{problems[0]}: the daemon creates it on its first start")
    if "locked by" in done.stderr:
        message = first_line(done.stderr).removeprefix("Error: ")
        return Check(name, "warn", f"not checked: {message}", "run doctor again once it is done")
    if not problems:
        message = first_line(done.stderr) or f"exit status {done.returncode}"
        return Check(name, "fail", f"sloopd store check failed: {message}", "run it by hand")
    shown = "; ".join(problems[:3]) + (
        f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    )
    fix = (
        problems[0].rpartition("; ")[2]
        if "newer than this sloopd" in problems[0]
        else f"restore a backup: sloopd store restore {state_dir}/backups/<file> "
        "(it saves the damaged store first)"
    )
    return Check(name, "fail", f"sloopd store check: {shown}", fix)


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_clock(d: Doctor) -> Check:
    name = "clock"
    now = time.time_ns() // 1_000_000
    found = Findings()
    if now < SANE_CLOCK_MS:
        found.add(
            "warn",
            f"this host's clock reads {_utc(now)}, before 2020",
            "set the clock (enable NTP: 'timedatectl set-ntp true')",
        )
    started, uptime = d.daemon.get("started_at_ms"), d.daemon.get("uptime_ms")
    if not d.up:
        found.add("warn", NOT_REACHABLE)
        return found.result(name, f"local clock {_utc(now)}")
    if not isinstance(started, int) or not isinstance(uptime, int):
        found.add("warn", "the dashboard carries no daemon.started_at_ms and uptime_ms")
        return found.result(name, f"local clock {_utc(now)}")
    skew = started + uptime - d.probe.midpoint_ms
    words = f"daemon's clock {span(abs(skew)) if abs(skew) >= 1000 else f'{abs(skew)} ms'}"
    words += " ahead of this host's" if skew > 0 else " behind this host's" if skew < 0 else ""
    if abs(skew) > CLOCK_SKEW_WARN_MS:
        found.add("warn", words, "synchronise both clocks (NTP); the daemon's times look off")
        return found.result(name, "")
    return found.result(name, f"{words} (local clock {_utc(now)})")
