"""What an agent names stays small in every reply (issue 23, item 7).

An agent chooses how many files it leaves and how long their names are.  On 0.7.0
3,000 untracked files with ~4,000-character paths put every path into the stage's
and the run's ``reason``, and every dashboard ``show`` carried them (11.7 MB) for
as long as the run was recent.  A reason quotes the first few paths and counts the
rest; ``paths`` lists a bounded number; a run row's ``reason`` is bounded whatever
the stored text.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import orjson

from sloopd.util import quoting
from tests.support.agents import Bench, sloop_toml, ticket_text

FILES = 3000
# Leaves FILES untracked files whose paths are ~4,000 characters (directories of 250
# characters: a name component is at most 255 bytes), then exits 0.
LITTER = f"""
import os
deep = os.path.join(*[c * 250 for c in "abcdefghijklmno"])
os.makedirs(deep)
for n in range({FILES}):
    open(os.path.join(deep, "z" * 230 + f"-{{n:05d}}"), "w").close()
"""
PATH_CHARS = 15 * 251 + 236


def litter(name: str, **keys: Any) -> dict[str, Any]:
    return {"name": name, "command": [sys.executable, "-c", LITTER], **keys}


def encoded_size(value: Any) -> int:
    return len(orjson.dumps(value))


def test_thousands_of_long_paths_left_behind_stay_out_of_every_reply(bench: Bench) -> None:
    flows = {
        "default": [
            # A reviewing stage (advisory: its leftovers are discarded, never merged) ...
            litter("check", action="command", fail_action="continue"),
            # ... then a producing one, which fails for what it left.
            litter("implement", action="agent"),
        ]
    }
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"messy": ticket_text("Messy")})
    bench.start()
    bench.post("messy")
    run = bench.wait_run("messy#1")
    assert run["state"] == "failed", encoded_size(run)

    check, implement = run["stages"]
    assert (check["stage"], implement["stage"]) == ("check", "implement")
    # The reason quotes the first few paths, each cut, and counts the rest.
    reason = implement["reason"]
    # (No assertion message quotes it: on 0.7.0 it is 12 MB.)
    assert reason.startswith("the agent left uncommitted changes in: ")
    assert len(reason) < 1000, len(reason)
    assert f"… and {FILES - quoting.QUOTED_NAMES:,} more" in reason
    assert "zzz-00000, " in reason  # a cut path keeps its file name's end
    # The run's reason names the stage and the classification, then the stage's reason.
    assert run["reason"].startswith(
        "stage 'implement' failed on execution 1: uncommitted_changes (the agent left"
    )
    assert len(run["reason"]) <= quoting.REASON_CHARS, len(run["reason"])

    # The discarded entry lists a bounded number of whole paths and counts the rest.
    (discarded,) = check["discarded"]
    listed = discarded["paths"]
    assert 0 < len(listed) <= quoting.LISTED_PATHS
    assert sum(map(len, listed)) <= quoting.LISTED_PATH_CHARS
    assert all(len(path) == PATH_CHARS for path in listed), {len(p) for p in listed}
    assert discarded["paths_omitted"] == FILES - len(listed)

    # The stored stage row does the same (it is what a replay and an export read).
    with bench.store() as conn:
        rows = [
            json.loads(data)
            for (data,) in conn.execute(
                "SELECT data FROM stage_log WHERE run = ? AND stage = 'implement'"
                " AND data LIKE '%\"paths\"%'",
                (run["id"],),
            )
        ]
    (finished,) = rows
    assert len(finished["paths"]) <= quoting.LISTED_PATHS
    assert finished["paths_omitted"] == FILES - len(finished["paths"])

    # Every reply that carries the run's row stays small while the run is recent.
    dashboard = bench.dashboard()
    (row,) = dashboard["recent"]
    assert row["id"] == run["id"]
    assert encoded_size(row) < 4096, encoded_size(row)
    assert encoded_size(dashboard) < 64 * 1024, encoded_size(dashboard)
    history = bench.ticket("messy")["runs"]
    assert encoded_size(history) < 8192, encoded_size(history)
    assert encoded_size(run) < 256 * 1024, encoded_size(run)
