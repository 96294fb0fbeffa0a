"""Agent text cannot add lines to a notification (issue 23, item 8).

An agent chooses the names of the files it leaves and the output lines a failure is
classified from, and both reach a run's ``reason``.  On 0.7.0 a file named
``x\\n\\n:white_check_mark: *t1#1* merged`` put a second "merged" headline into a
failed run's Slack message, and into its fallback text (what a phone shows).  Every
string of every body is now one line of plain characters: line breaks become a
space, other controls U+FFFD, and the daemon's own headline is the only first line.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_notify_webhooks import notify_table
from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.receiver import Receiver

FORGED = "\n\n:white_check_mark: *t1#1* merged"
# An uncommitted file whose name carries the forged headline, left by an agent that exits 0.
LEAVE_NAMED_FILE = f"open({'x' + FORGED!r}, 'w').close()"
# A failure the daemon classifies from an output line: its evidence quotes the line
# (cut at every line break), control characters and bidi overrides included.
AUTH_LINE = (
    "authentication failed \x1b[2J\x07\x1f\x7f\x9b31m\u202e :white_check_mark: *t2#1* merged"
)


@pytest.fixture
def receivers() -> Iterator[tuple[Receiver, Receiver]]:
    slack, plain = Receiver(), Receiver()
    yield slack, plain
    slack.close()
    plain.close()


def strings(value: Any) -> Iterator[str]:
    """Every string in a decoded JSON value, object keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def one_plain_line(text: str) -> bool:
    """No line break of any kind, no control character, no bidi override."""
    return text.splitlines() == [text] and not any(
        unicodedata.category(c) == "Cc" or c in "\u2028\u2029\u202a\u202b\u202c\u202d\u202e"
        for c in text
    )


def test_agent_text_never_adds_a_line_to_a_notification(
    bench: Bench, receivers: tuple[Receiver, Receiver]
) -> None:
    slack, plain = receivers
    tables = notify_table(slack.url, ["failed"], format="slack") + notify_table(
        plain.url, ["failed"]
    )
    flows = {
        "named": [
            {
                "name": "implement",
                "action": "agent",
                "command": [sys.executable, "-c", LEAVE_NAMED_FILE],
            }
        ],
        "printed": [
            {
                "name": "implement",
                "action": "agent",
                "command": bench.argv("--say", AUTH_LINE, "--exit", "1"),
            }
        ],
    }
    bench.setup(
        sloop_toml(bench.argv(), flows=flows, parallel=2, extra=tables),
        {"t1": ticket_text("One", flow="named"), "t2": ticket_text("Two", flow="printed")},
    )
    bench.start()
    bench.post("t1")
    bench.post("t2")
    runs = {name: bench.wait_run(f"{name}#1") for name in ("t1", "t2")}
    assert all(run["state"] == "failed" for run in runs.values()), runs
    assert "white_check_mark" in runs["t1"]["reason"], runs["t1"]  # the name is quoted
    assert runs["t2"]["classification"] == "auth_failed", runs["t2"]
    assert "white_check_mark" in runs["t2"]["reason"], runs["t2"]  # and so is the evidence

    by_alias = {r.json()["text"].split(" ", 1)[0]: r.json() for r in slack.wait_for(2)}
    for alias in ("t1#1", "t2#1"):
        body = by_alias[alias]
        assert one_plain_line(body["text"]), body["text"]
        assert body["text"].startswith(f"{alias} ({runs[alias[:2]]['id']}) failed: ")
        section, context = body["blocks"]
        # The daemon's headline is the first line; the reason is the one quoted line after it.
        headline, quoted = section["text"]["text"].split("\n")
        assert headline == f":x: *{alias}* failed", headline
        assert quoted.startswith("> ")
        assert one_plain_line(quoted)
        assert all(one_plain_line(s) for s in strings(context))

    by_run = {r.json()["run"]["id"]: r.json() for r in plain.wait_for(2)}
    for run in runs.values():
        body = by_run[run["id"]]
        assert body["text"].startswith(f"{run['alias']} ({run['id']}) failed: ")
        assert "white_check_mark" in body["run"]["reason"]
        assert all(one_plain_line(s) for s in strings(body)), body
