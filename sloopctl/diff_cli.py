"""``sloopctl diff RUN``: the run's branch against its base, as the daemon's ``diff`` gives it.

The unified diff goes to stdout as git prints it, so it pipes into a pager or
``git apply``; what a person needs beside it (the commits, the per-file summary,
a cut) goes to stderr.  ``sloopctl.cli`` registers ``COMMANDS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import click

from sloopctl.invoke import EXIT_OK, answer, common_options, connected, options, present_args
from sloopctl.layout import text


def summary_lines(data: Mapping[str, Any]) -> list[str]:
    """``base..head`` and one ``+A -D path`` line per file, then any cut or problem."""
    base, head = text(data.get("base"))[:12], text(data.get("head"))[:12]
    lines = [f"{text(data.get('run'))} {text(data.get('branch'))}: {base}..{head}"]
    files = data.get("files")
    for entry in files if isinstance(files, list) else []:
        if not isinstance(entry, dict):
            continue
        path = text(entry.get("path"))
        if entry.get("old_path"):
            path = f"{text(entry['old_path'])} => {path}"
        counts = (
            "binary"
            if entry.get("binary")
            else f"+{text(entry.get('added'))} -{text(entry.get('deleted'))}"
        )
        lines.append(f"  {counts:>14}  {path}")
    if data.get("files_truncated"):
        lines.append("  … more files changed than are listed")
    if data.get("truncated"):
        lines.append(f"diff cut at {text(data.get('max_bytes'))} bytes (--max-bytes N for more)")
    if data.get("problem"):
        lines.append(f"no diff: {text(data['problem'])}")
    return lines


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    metavar="N",
    help="At most N bytes of diff text (daemon default 256 KiB, at most 4 MiB).",
)
@click.option("--stat", "stat_only", is_flag=True, help="Only the per-file summary.")
@common_options
def diff(run_ref: str, max_bytes: int | None, stat_only: bool) -> None:
    """What a run's branch changed against the commit it started from.

    RUN is a run id or alias.  A merged run is diffed from main as it was
    just before its merge, so this is what main received.  The diff goes to
    stdout; the commits, the per-file summary and any cut go to stderr.
    """
    with connected() as client:
        reply = client.call("diff", present_args(run=run_ref, max_bytes=max_bytes))
    if not reply.ok or options().json:
        raise click.exceptions.Exit(answer("diff", reply))
    data = reply.data if isinstance(reply.data, dict) else {}
    for line in summary_lines(data):
        click.echo(line, err=True)
    body = data.get("text")
    if not stat_only and isinstance(body, str) and body:
        click.echo(body, nl=False)
    raise click.exceptions.Exit(EXIT_OK)


COMMANDS: Final[tuple[click.Command, ...]] = (diff,)
