"""Flow and stage names that would break refs, files or selectors, through a real daemon.

A stage name becomes part of the prompt file's name and of ``logs`` selectors
(``<stage>#<attempt>``); before 0.6.0 a ``/`` in one passed validation and failed
every run.  Such a file is refused at start, naming the key and the rule, and a
reload that finds one keeps the last good configuration.
"""

from __future__ import annotations

import signal

import pytest

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import new_daemon, wait_until


@pytest.mark.parametrize(
    ("flows", "key", "why"),
    [
        ({"default": [{"name": "unit/tests", "action": "agent"}]}, "stages[0].name", "'/'"),
        ({"default": [{"name": "a b", "action": "agent"}]}, "stages[0].name", "' '"),
        ({"docs/fast": [{"name": "write", "action": "agent"}]}, "flows.docs/fast", "'/'"),
    ],
)
def test_a_name_that_breaks_refs_is_refused_at_start(
    bench: Bench, flows: dict[str, list[dict[str, str]]], key: str, why: str
) -> None:
    if "/" in next(iter(flows)):
        # A TOML key with a slash must be quoted.
        config = sloop_toml(["true"]).rstrip("\n")
        config += '\n\n[[flows."docs/fast".stages]]\nname = "write"\naction = "agent"\n'
    else:
        config = sloop_toml(["true"], flows=flows)
    bench.setup(config, {})
    daemon = new_daemon(bench.root, bench.repo)
    code, stdout, log = daemon.run_to_exit()
    assert code != 0, log
    assert stdout == ""
    assert key in log, log
    assert f"it contains {why}" in log, log
    assert "letters, digits" in log, log  # the rule, named


def test_a_reload_with_a_bad_stage_name_keeps_the_last_good_flow(bench: Bench) -> None:
    agent = bench.argv("--write", "{ticket}.txt=x")
    good = sloop_toml(agent)
    bench.setup(good, {"one": ticket_text("One")}, commit_config=False)
    bench.start()
    assert bench.daemon is not None

    bad = sloop_toml(agent, flows={"default": [{"name": "unit/tests", "action": "agent"}]})
    bench.write_config(bad)
    bench.daemon.signal(signal.SIGHUP)
    wait_until(lambda: "reload refused" in bench.log())
    assert "'flows.default.stages[0].name'" in bench.log()
    assert bench.daemon.alive()

    # Runs still walk the last good flow: implement, sync, merge.
    bench.post("one")
    run = bench.wait_run("one#1")
    assert run["state"] == "merged", run
    assert [s["stage"] for s in run["stages"]] == ["implement", "sync", "merge"]
