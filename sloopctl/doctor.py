"""``sloopctl doctor``: independent checks of a repository's Sloop set-up.

One line per check: ``ok``, ``warn`` or ``FAIL``, what it found, and for a
problem the fix; with ``--json`` one object ``{checks: [{name, status, detail,
fix}], ok}`` instead of an envelope, since doctor is local.  The exit status is
0 when no check failed (warnings allowed) and 1 when one did: "the daemon is
down" is one of the findings here, not an error of the command, so doctor
never exits 3 or 4.

This module is only the command, imported by ``sloopctl.cli`` at start-up; the
checks live in ``sloopctl.diagnosis``, imported when doctor runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

import click
import orjson

from sloopctl.fold import fold_for
from sloopctl.layout import colour_enabled, painter
from sloopctl.locate import METRICS_URL_ENV

EXIT_HEALTHY: Final = 0
EXIT_UNHEALTHY: Final = 1
EXIT_INTERRUPTED: Final = 130


@click.command()
@click.option(
    "--socket",
    "socket_path",
    metavar="PATH",
    help="Operator socket (default: as for every command).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object: {checks: [{name, status, detail, fix}], ok}.",
)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="State directory (default: the daemon's, else sloop/ in the git common directory).",
)
@click.option("--full", is_flag=True, help="Also run 'git fsck --connectivity-only' (slow).")
@click.option(
    "--metrics-url",
    metavar="URL",
    envvar=METRICS_URL_ENV,
    help=f"sloopd's Prometheus endpoint (or ${METRICS_URL_ENV}), e.g. "
    "http://127.0.0.1:9464/metrics.",
)
@click.pass_context
def doctor(
    ctx: click.Context,
    socket_path: str | None,
    as_json: bool,
    state_dir: Path | None,
    full: bool,
    metrics_url: str | None,
) -> None:
    """Check the daemon, store, git, worktrees, process groups and clock.

    \b
    One line per check: ok, warn or FAIL, what was found, and the fix.
    Checks: socket, version, sandbox, workspaces (copy-on-write checkouts, or
    whole ones and why), clis (each configured preset's CLI
    resolves inside the sandbox), prompt ({prompt} in a command's argv: readable by
    every local user), store, git, worktrees, groups, clock, metrics.
    Every check runs even when an earlier one failed.  Exit status: 0 when
    no check failed (warnings allowed), 1 when one did; a daemon that is
    down is a failed check here, not exit 3 or 4.
    """
    from sloopctl.diagnosis import Options, diagnose
    from sloopctl.invoke import refuse_inside_run

    # The group's --json/--socket (given before the command name) live in ctx.obj.
    shared = ctx.obj
    # Inside a run there is no daemon to check, and "start it" would be wrong advice.
    refuse_inside_run(socket_path or getattr(shared, "socket", None))
    options = Options(
        socket=socket_path or getattr(shared, "socket", None),
        state_dir=state_dir,
        full=full,
        metrics_url=metrics_url or None,
    )
    try:
        checks = diagnose(options)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
    healthy = all(check.status != "fail" for check in checks)
    if as_json or getattr(shared, "json", False):
        report = {"checks": [check.as_json() for check in checks], "ok": healthy}
        click.echo(orjson.dumps(report))
    else:
        paint = painter(colour_enabled(sys.stdout))
        for check in checks:
            # Folded at words on a terminal, each continuation under the check's detail.
            click.echo(fold_for(sys.stdout, check.line(paint)))
    raise click.exceptions.Exit(EXIT_HEALTHY if healthy else EXIT_UNHEALTHY)
