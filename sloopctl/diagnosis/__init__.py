"""The checks of ``sloopctl doctor`` (the command itself is ``sloopctl.doctor``).

Each check returns one ``Check``: ``ok``, ``warn`` or ``fail``, what it found,
and for a problem the fix.  ``diagnose`` runs every check whatever the others
found, so one report names everything that is wrong.

Like all of sloopctl this imports nothing from the daemon but ``sloopd.wire.api``.
Loaded only when doctor runs, so it may import what it likes; ``tomllib`` and
``urllib`` are still imported only by the checks that use them.

\b
- ``report``: ``Check`` and ``Findings``, the lines of the report
- ``host``: what is read without the daemon (daemon.json, git, /proc, groups)
- ``facts``: ``Doctor``, the facts every check reads, and the socket probe
- ``daemon_checks``: socket, version, sandbox, clis, store, clock
- ``config_checks``: what sloop.toml exposes (``{prompt}`` in argv)
- ``local_checks``: git, worktrees, process groups
- ``metrics``: the Prometheus series, else the dashboard's counts
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from sloopctl.diagnosis.config_checks import check_prompt
from sloopctl.diagnosis.daemon_checks import (
    check_clis,
    check_clock,
    check_executor,
    check_hardening,
    check_sandbox,
    check_socket,
    check_store,
    check_version,
    check_workspaces,
)
from sloopctl.diagnosis.facts import Doctor, Options, Probe
from sloopctl.diagnosis.host import parse_worktrees
from sloopctl.diagnosis.local_checks import check_git, check_groups, check_worktrees
from sloopctl.diagnosis.metrics import check_metrics, metrics_summary, parse_exposition
from sloopctl.diagnosis.report import Check, Findings

__all__ = [
    "CHECKS",
    "Check",
    "Doctor",
    "Findings",
    "Options",
    "Probe",
    "check_clock",
    "diagnose",
    "metrics_summary",
    "parse_exposition",
    "parse_worktrees",
]

CHECKS: Final[tuple[tuple[str, Callable[[Doctor], Check]], ...]] = (
    ("socket", check_socket),
    ("version", check_version),
    ("sandbox", check_sandbox),
    ("workspaces", check_workspaces),
    ("hardening", check_hardening),
    ("clis", check_clis),
    ("executor", check_executor),
    ("prompt", check_prompt),
    ("store", check_store),
    ("git", check_git),
    ("worktrees", check_worktrees),
    ("groups", check_groups),
    ("clock", check_clock),
    ("metrics", check_metrics),
)


def diagnose(options: Options) -> list[Check]:
    """Run every check, whatever the others found; one broken check hides no other."""
    doctor = Doctor(options)
    results = []
    try:
        for name, check in CHECKS:
            try:
                results.append(check(doctor))
            except Exception as exc:
                results.append(
                    Check(
                        name,
                        "fail",
                        f"the check itself failed: {exc.__class__.__name__}: {exc}",
                        "report this as a sloopctl bug",
                    )
                )
    finally:
        doctor.close()
    return results
