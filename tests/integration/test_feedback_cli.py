"""sloopctl inside a run, against the real daemon (issue 33): an operator verb says the
worker socket does not serve it (never "start it with 'sloopctl daemon'"), and ``brief``
prints the feedback of a stage sent back, the failing output fenced under a label.

The implementer prints what sloopctl told it, so the run's log holds it, and fixes
its work from ``brief --json`` on its second execution.
"""

from __future__ import annotations

import subprocess

from tests.integration.test_feedback import TEST, flow
from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import sloopctl_argv, sloopctl_env

AGENT = [
    "sh",
    "-c",
    'sloopctl logs "$SLOOP_RUN"; echo "logs exited $?"; '
    'sloopctl daemon; echo "daemon exited $?"; '
    "sloopctl brief; "
    'want=$(sloopctl brief --json | grep -o "WANT=[A-Za-z0-9]*" | head -n 1 | cut -d= -f2); '
    'echo "${want:-guess}" > answer.txt; git add answer.txt; '
    'git commit -q -m "answer ${want:-guess}" || true',
]


def test_inside_a_run_sloopctl_says_what_the_worker_socket_serves_and_prints_the_feedback(
    bench: Bench,
) -> None:
    stages = flow()
    stages["default"][1]["command"] = TEST
    bench.setup(sloop_toml(AGENT, flows=stages), {"answer": ticket_text("Answer")})
    bench.start()
    bench.post("answer")
    run = bench.wait_run("answer#1", timeout=90)
    assert run["state"] == "merged", run
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    socket = bench.daemon.socket

    def logs_of(execution: str) -> str:
        shown = subprocess.run(
            sloopctl_argv(socket, "logs", run["id"], "--stage", execution),
            capture_output=True,
            text=True,
            env=sloopctl_env(),
            timeout=30,
            check=True,
        )
        return shown.stdout

    first, second = logs_of("implement#1"), logs_of("implement#2")
    for said in (first, second):
        assert (
            "the worker socket serves brief, show, note and verdict; 'logs' is an operator verb"
            in said
        ), said
        assert "'daemon' is an operator verb" in said, said
        assert "logs exited 2" in said, said
        assert "daemon exited 2" in said, said
        assert "start it with" not in said, said
    assert "What happened since your last execution" not in first
    assert "What happened since your last execution (1)" in second, second
    lines = [line.split("] ", 1)[-1] for line in second.splitlines()]
    head = next(i for i, line in enumerate(lines) if line.startswith("test#1 of "))
    assert lines[head].startswith(f"test#1 of {run['id']} failed: "), lines[head:]
    fenced = [line for line in lines[head:] if line.startswith("  │ ")]
    assert "  │ FAILED: answer.txt WANT=Z1a2b GOT=guess" in fenced, lines[head:]
