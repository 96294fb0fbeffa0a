"""``abort`` with the operator's reason (0.8.0): kept on the run, from the CLI as from the web."""

from __future__ import annotations

import subprocess

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import sloopctl_argv, sloopctl_env


def test_sloopctl_abort_reason_is_kept_in_the_runs_reason(bench: Bench) -> None:
    slow = [
        {
            "name": "implement",
            "action": "agent",
            "command": bench.argv("--wait-for", bench.flag("go")),
        }
    ]
    bench.setup(
        sloop_toml(bench.argv(), flows={"slow": slow}), {"s": ticket_text("S", flow="slow")}
    )
    bench.start()
    bench.post("s")
    run = bench.wait_stage_running("s#1", "implement")
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    argv = sloopctl_argv(bench.daemon.socket, "abort", "s#1", "--reason", "wrong ticket")
    done = subprocess.run(argv, env=sloopctl_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    settled = bench.wait_run(run["id"])
    assert settled["state"] == "aborted"
    assert settled["reason"] == "aborted by the operator: wrong ticket"
    # Without one the reason is the one it always was.
    bench.ok("ready", {"ref": "s"})
    second = bench.wait_stage_running("s#2", "implement")
    aborted = bench.ok("abort", {"run": second["id"]})["run"]
    assert aborted["reason"] == "aborted by the operator"
    # An empty reason is refused like any empty name, and the run goes on.
    bench.ok("ready", {"ref": "s"})
    third = bench.wait_stage_running("s#3", "implement")
    refused = bench.client.error("abort", {"run": third["id"], "reason": "  "})
    assert refused["code"] == "invalid_arguments"
    bench.release("go")
    assert bench.wait_run(third["id"])["state"] == "needs_review"
