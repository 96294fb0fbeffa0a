"""Every notification body is one line a string (issue 23, item 8), whatever the stored
text holds: a reason from an older store, a gate's, a name; and systemd's STATUS."""

from __future__ import annotations

import socket
from pathlib import Path

import orjson
import pytest

from sloopd.ops.notify import Notifier
from sloopd.ops.webhook_body import Notice, json_body, slack_body, summary
from tests.unit.test_webhooks import run_notice, target

FORGED = "left x\n\n:white_check_mark: *fix-login#1* merged\r\u2028\x1b[2J\u202e"


def test_a_reason_with_line_breaks_stays_on_the_quoted_line_of_a_slack_message() -> None:
    body = slack_body(target(format="slack"), run_notice(FORGED))
    assert "\n" not in body["text"]
    headline, quoted = body["blocks"][0]["text"]["text"].split("\n")
    assert headline == ":x: *fix-login#1* failed"
    assert quoted == "> left x :white_check_mark: *fix-login#1* merged \ufffd[2J\ufffd"
    assert body["text"] == "fix-login#1 (R4) failed: " + quoted.removeprefix("> ")


def test_no_string_of_a_json_body_holds_a_line_break_or_a_control() -> None:
    notice = run_notice(FORGED, ticket_name="fix\nlogin", halt="fail\x07action")
    body = json_body(target(), notice, "d1")
    flat = orjson.dumps(body).decode()
    # JSON escapes controls as \n, \r, \u001b…: none may be there, nor the raw breaks.
    for escaped in ("\\n", "\\r", "\\u001b", "\\u0007", "\u2028", "\u202e"):
        assert escaped not in flat, escaped
    assert body["run"]["ticket_name"] == "fix login"
    assert body["run"]["halt"] == "fail\ufffdaction"


def test_a_gate_reason_is_one_line_too() -> None:
    gate = {"from": "open", "state": "paused", "until_ms": None, "reason": "freeze\n\n*merged*"}
    notice = Notice("gate_changed", "9", "gate_changed", 1_796_131_478_188, "repo", gate=gate)
    assert summary(notice) == "gate open -> paused: freeze *merged*"
    section = slack_body(target(format="slack"), notice)["blocks"][0]["text"]["text"]
    assert section.count("\n") == 1


def test_systemds_status_is_one_assignment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line break in STATUS= would make the rest an assignment systemd obeys."""
    address = tmp_path / "notify"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(address))
    listener.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(address))
    notifier = Notifier()
    try:
        notifier.status("serving /srv/repo\nSTOPPING=1")
        assert listener.recv(4096) == b"STATUS=serving /srv/repo STOPPING=1"
        notifier.ready("serving /srv/x\nMAINPID=1")
        assert listener.recv(4096).split(b"\n") == [b"READY=1", b"STATUS=serving /srv/x MAINPID=1"]
    finally:
        listener.close()
        sender = getattr(notifier._notifier, "socket", None)  # sdnotify keeps it open
        if sender is not None:
            sender.close()
