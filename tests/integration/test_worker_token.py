"""The worker token's two places: ``SLOOP_TOKEN`` and the file ``SLOOP_TOKEN_FILE`` names.

An agent's ``sloopctl verdict`` works either way; with ``[agent] token_env = false``
the token is in no environment the agent's processes inherit (docs/security.md,
"Where the worker token is").
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.agents import Bench, install_probe, probe_argv, sloop_toml, ticket_text

FLOWS = {"default": [{"name": "self", "action": "agent", "result_check": "reported"}]}


def probed_run(bench: Bench, token_env: bool | None) -> tuple[dict[str, Any], dict[str, Any]]:
    install_probe(bench)
    out = bench.flag("self-{run}.json")
    steps: list[dict[str, Any]] = [
        {"do": "env", "key": "env"},
        {"do": "ctl", "key": "verdict", "argv": ["verdict", "pass", "--reason", "mine"]},
    ]
    stage = {**FLOWS["default"][0], "command": probe_argv(bench, out, steps)}
    config = sloop_toml(bench.argv(), flows={"default": [stage]})
    if token_env is not None:
        config = config.replace("[agent]\n", f"[agent]\ntoken_env = {json.dumps(token_env)}\n", 1)
    bench.setup(config, {"work": ticket_text("Work")})
    bench.start()
    bench.post("work")
    run = bench.wait_run("work#1")
    seen: dict[str, Any] = json.loads(bench.path(f"self-{run['id']}.json").read_text())
    return run, seen


@pytest.mark.parametrize("token_env", [None, False])
def test_the_agents_verdict_counts_with_the_token_in_either_place(
    bench: Bench, token_env: bool | None
) -> None:
    run, seen = probed_run(bench, token_env)
    names = seen["env"]
    assert names.get("SLOOP_TOKEN_FILE") == "/sloop/token", seen
    assert ("SLOOP_TOKEN" in names) is (token_env is None)
    assert seen["verdict"]["rc"] == 0, seen["verdict"]
    # The flow has no merge stage: a passing walk ends for a person to look at.
    assert run["state"] == "needs_review", run
    assert run["stages"][0]["state"] == "passed", run["stages"]
    assert run["stages"][0]["verdict_source"] == "reported"
