"""An agent that removes its own checkout, or its ``.git``, is told so (issue 34, item 12).

On 0.8.0 the stage failed with git's own words, naming a path inside the sandbox:
``cannot read the files of <state>/checkouts/R1: fatal: not a git repository:
'/sloop/work/.git'``.  The reason now says what the stage did.
"""

from __future__ import annotations

import sys

import pytest

from tests.support.agents import Bench, sloop_toml, ticket_text

# Removes what its argument names, in its checkout (its working directory), and exits 0.
REMOVER = """
import os, shutil, sys
if sys.argv[1] == "all":
    for name in os.listdir("."):
        if os.path.isdir(name) and not os.path.islink(name):
            shutil.rmtree(name)
        else:
            os.unlink(name)
else:
    shutil.rmtree(".git")
"""


@pytest.mark.parametrize(
    ("what", "expected"),
    [
        (".git", "the stage removed its checkout's .git"),
        ("all", "the stage removed its checkout "),
    ],
)
def test_a_stage_that_removes_its_checkout_fails_saying_so(
    bench: Bench, what: str, expected: str
) -> None:
    agent = [sys.executable, "-c", REMOVER, what]
    bench.setup(sloop_toml(agent), {"gone": ticket_text("Gone")})
    bench.start()
    bench.post("gone")
    run = bench.wait_run("gone#1")
    assert run["state"] == "failed", run
    implement = run["stages"][0]
    reason = implement["reason"] or ""
    assert expected in reason, reason
    assert "not a git repository" not in reason, reason
    assert "/sloop/" not in reason, reason
    assert expected in (run["reason"] or ""), run
