"""A reported verdict's reason is bounded where it is stored and where it is shown
(issue 34, item 13).

A worker's ``verdict --reason`` took anything up to a request line (1 MiB), stored it
whole and showed it whole in every ``show RUN`` of the run.  Now the reason is cut to
``quoting.VERDICT_REASON_CHARS`` characters, ending in "…", as the verb stores it
(its answer shows what was kept), for a stage worker and a panel seat alike; a reason
an older daemon stored whole is shown cut the same way.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from sloopd.util.quoting import ELLIPSIS, VERDICT_REASON_CHARS
from tests.support.agents import Bench, sloop_toml, ticket_text

LONG = 300_000  # characters: far past the bound, well inside a request line

# Reports a verdict whose reason is argv[2] characters long, and records the answer.
REPORTER = r"""
import json, os, socket, sys
out, length = sys.argv[1], int(sys.argv[2])
reason = ("why " * (length // 4 + 1))[:length]
message = {"v": 1, "id": "v", "verb": "verdict", "token": os.environ["SLOOP_TOKEN"],
           "args": {"verdict": "pass", "reason": reason}}
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(os.environ["SLOOP_SOCKET"])
s.sendall(json.dumps(message).encode() + b"\n")
answer = s.makefile("rb").readline()
with open(out, "wb") as f:
    f.write(answer)
"""


def bounded(reason: Any) -> None:
    assert isinstance(reason, str), reason
    assert len(reason) == VERDICT_REASON_CHARS, len(reason)
    assert reason.endswith(ELLIPSIS), reason[-20:]
    assert reason.startswith("why why "), reason[:20]


def test_a_verdicts_reason_is_bounded_where_stored_and_shown(bench: Bench) -> None:
    reporter = bench.root / "agents" / "reporter.py"
    reporter.write_text(REPORTER)

    def command(name: str) -> list[str]:
        return [bench.argv()[0], str(reporter), bench.flag(name), str(LONG)]

    flow: list[dict[str, Any]] = [
        {"name": "self", "action": "agent", "result_check": "reported", "command": command("self")},
        {
            "name": "review",
            "action": "agent",
            "result_check": "panel",
            "quorum": 1,
            "reviewers": [{"target": "claude", "command": command("seat")}],
        },
    ]
    bench.setup(
        sloop_toml(bench.argv(), flows={"long": flow}),
        {"long": ticket_text("Long reasons", flow="long")},
    )
    bench.start()
    bench.post("long")
    run = bench.wait_run("long#1")

    # The verb's answer: what was stored.
    for name in ("self", "seat"):
        answer = json.loads(bench.path(name).read_text())
        assert answer["ok"], answer
        bounded(answer["data"]["verdict"]["reason"])

    # Stored: the verdict rows and the stage's result.
    with bench.store() as conn:
        stored = conn.execute(
            "SELECT kind, data FROM stage_log WHERE run = ? AND kind IN ('verdict', "
            "'stage_finished')",
            (run["id"],),
        ).fetchall()
    reasons = [orjson.loads(str(data)).get("reason") for _kind, data in stored]
    assert len([r for r in reasons if r is not None and r.startswith("why")]) >= 3, reasons
    for reason in reasons:
        if reason is not None and reason.startswith("why"):
            bounded(reason)

    # Shown.
    rows = {row["stage"]: row for row in run["stages"]}
    assert rows["self"]["verdict_source"] == "reported", rows["self"]
    bounded(rows["self"]["reason"])
    bounded(rows["review"]["reviewers"][0]["reason"])

    # A reason an older daemon stored whole is shown cut.
    assert bench.stop() == 0
    whole = "why " * (LONG // 4)
    with bench.store() as conn:
        conn.execute(
            "UPDATE stage_log SET data = json_set(data, '$.reason', ?) WHERE run = ? "
            "AND kind IN ('verdict', 'stage_finished') "
            "AND json_extract(data, '$.reason') LIKE 'why%'",
            (whole, run["id"]),
        )
        assert conn.changes() >= 3
    bench.start()
    shown = bench.show_run("long#1")
    assert shown is not None
    rows = {row["stage"]: row for row in shown["stages"]}
    bounded(rows["self"]["reason"])
    bounded(rows["review"]["reviewers"][0]["reason"])
