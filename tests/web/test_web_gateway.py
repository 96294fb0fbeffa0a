"""``sloopctl web`` over plain HTTP: the token, the refusals, the feeds.

No browser here: these speak HTTP to a real gateway in front of a real daemon,
as an attacker's page or a script would, and check what comes back.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path

import orjson

from sloopctl.web.settings import is_loopback, parse_listen
from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import sloopctl_argv, sloopctl_env
from tests.support.web import EventStream, WebGateway, gateway, socket_of, wait_gone

MARKER = "zq-echo-marker-41"


def started(bench: Bench, *tickets: str) -> Bench:
    bench.setup(sloop_toml(bench.argv()), {name: ticket_text(name.title()) for name in tickets})
    bench.start()
    for name in tickets:
        bench.post(name, manual=True)
    return bench


def post_action(web: WebGateway, body: Mapping[str, object], **headers: str) -> tuple[int, bytes]:
    sent = {
        "Origin": web.base,
        "Sec-Fetch-Site": "same-origin",
        "X-Sloop-CSRF": web.session()["csrf"],
        "Content-Type": "application/json",
        **headers,
    }
    sent = {k: v for k, v in sent.items() if v}
    status, _, answer = web.request("POST", "/api/action", headers=sent, body=orjson.dumps(body))
    return status, answer


def test_the_token_is_written_0600_and_removed_at_exit(bench: Bench, tmp_path: Path) -> None:
    started(bench)
    token_file = tmp_path / "web.token"
    with gateway(socket_of(bench), token_file) as web:
        mode = stat.S_IMODE(os.stat(token_file).st_mode)
        assert mode == 0o600, oct(mode)
        assert token_file.read_text().strip() == web.token
        assert len(web.token) >= 40
        assert web.url == f"http://127.0.0.1:{web.port}/?token={web.token}"
    assert not token_file.exists()


def test_the_token_url_sets_a_strict_cookie_and_leaves_the_address(
    bench: Bench, tmp_path: Path
) -> None:
    started(bench)
    with gateway(socket_of(bench), tmp_path / "t") as web:
        status, headers, _ = web.request("GET", f"/run/R1?token={web.token}&x=1", cookie=False)
        assert status == 303
        assert headers["Location"] == "/run/R1?x=1"  # the token is gone from the address
        cookie = headers["Set-Cookie"]
        assert cookie.startswith(f"sloop_web_{web.port}={web.token};")
        for flag in ("HttpOnly", "SameSite=Strict", "Path=/"):
            assert flag in cookie, cookie
        assert headers["Referrer-Policy"] == "no-referrer"


def test_requests_without_the_token_or_from_elsewhere_are_refused(
    bench: Bench, tmp_path: Path
) -> None:
    started(bench, "private")
    with gateway(socket_of(bench), tmp_path / "t", "--allow-actions") as web:
        for path in ("/", "/static/app.js", "/api/show", "/api/diff?run=R1", "/sse/show"):
            status, headers, body = web.request("GET", path, cookie=False)
            assert (status, body) == (401, b"unauthorized\n"), path
            assert "default-src 'none'" in headers["Content-Security-Policy"]
        wrong = {"Cookie": f"sloop_web_{web.port}={MARKER}"}
        status, _, body = web.request("GET", f"/api/show?ref={MARKER}", headers=wrong, cookie=False)
        assert (status, body) == (401, b"unauthorized\n")
        status, _, body = web.request("GET", f"/?token={MARKER}", cookie=False)
        assert (status, body) == (401, b"unauthorized\n")
        # DNS rebinding: the right cookie, but a page of another name.
        for host in (f"{MARKER}.example:{web.port}", "127.0.0.1:1", f"{MARKER}.example"):
            status, _, body = web.request("GET", "/api/show", headers={"Host": host})
            assert (status, body) == (403, b"forbidden\n"), host
        status, _, body = web.request("GET", f"/?token={web.token}", headers={"Host": "evil:1"})
        assert status == 403
        # Cross-site writes: a foreign origin, a cross-site fetch, no CSRF header.
        hold = {"verb": "hold", "args": {"ref": "private"}}
        for headers in (
            {"Origin": f"http://{MARKER}.example"},
            {"Origin": ""},
            {"Sec-Fetch-Site": "cross-site"},
            {"X-Sloop-CSRF": MARKER},
            {"X-Sloop-CSRF": ""},
        ):
            status, body = post_action(web, hold, **headers)
            assert (status, body) == (403, b"forbidden\n"), headers
        assert bench.ticket("private")["state"] == "ready"
        # No verb beyond the six, and no argument beyond theirs, reaches the socket.
        for body_sent in (
            {"verb": "post", "args": {"path": "tickets/private.md"}},
            {"verb": "gc", "args": {}},
            {"verb": "hold", "args": {"ref": "private", "extra": "x"}},
            {"verb": "hold", "args": {"ref": 1}},
            {"verb": "hold", "args": ["private"]},
        ):
            status, body = post_action(web, body_sent)
            assert (status, body) == (400, b"bad request\n"), body_sent
        status, answer = post_action(web, hold)
        assert status == 200
        assert orjson.loads(answer)["ok"] is True
        assert bench.ticket("private")["state"] == "held"


def test_read_only_refuses_every_action(bench: Bench, tmp_path: Path) -> None:
    started(bench, "calm")
    with gateway(socket_of(bench), tmp_path / "t") as web:
        assert web.session()["actions"] is False
        for verb, args in (("hold", {"ref": "calm"}), ("pause", {}), ("resume", {})):
            status, body = post_action(web, {"verb": verb, "args": args})
            assert status == 403, verb
            assert b"--allow-actions" in body, verb
        assert bench.ticket("calm")["state"] == "ready"
        assert bench.dashboard()["gate"]["state"] == "open"


def test_a_loopback_address_is_required_unless_allowed(bench: Bench, tmp_path: Path) -> None:
    started(bench)
    for listen in ("0.0.0.0:0", "192.0.2.1:8421", "example.com:0"):
        done = subprocess.run(
            sloopctl_argv(socket_of(bench), "web", "--listen", listen),
            capture_output=True,
            text=True,
            env=sloopctl_env(),
            timeout=30,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert "not a loopback address" in done.stderr
        assert "--allow-remote" in done.stderr
    assert [is_loopback(h) for h in ("127.0.0.1", "127.9.9.9", "::1", "localhost")] == [True] * 4
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "localhost.evil"))
    assert parse_listen("[::1]:9000").url(9000) == "http://[::1]:9000"
    assert parse_listen(":0").host == "127.0.0.1"


def test_one_follower_per_feed_whatever_the_number_of_browsers(
    bench: Bench, tmp_path: Path
) -> None:
    started(bench, "watched")
    supports_long_poll = "epoch" in bench.dashboard()
    with gateway(socket_of(bench), tmp_path / "t") as web:
        streams = [EventStream(web, "/sse/show") for _ in range(3)]
        try:
            for stream in streams:
                assert stream.status == 200
                _, data = stream.until(lambda name, _: name == "show")
                assert data["kind"] == "dashboard"
                assert [t["name"] for t in data["tickets"]] == ["watched"]
            feeds = web.session()["feeds"]
            assert [(f["key"], f["subscribers"]) for f in feeds] == [("show:", 3)]
            assert feeds[0]["mode"] == ("long_poll" if supports_long_poll else "polling")
            # A change reaches every subscriber, pushed, without a request of theirs.
            bench.ok("hold", {"ref": "watched"})
            for stream in streams:
                stream.until(
                    lambda name, data: name == "show" and data["tickets"][0]["state"] == "held"
                )
        finally:
            for stream in streams:
                stream.close()
        # Gone browsers are noticed (at the latest at the next heartbeat) and unsubscribed.
        wait_gone(lambda: web.session()["feeds"][0]["subscribers"] > 0, timeout=40)


def test_the_daemon_going_away_is_reported_not_fatal(bench: Bench, tmp_path: Path) -> None:
    started(bench, "survive")
    with gateway(socket_of(bench), tmp_path / "t") as web:
        stream = EventStream(web, "/sse/show")
        try:
            stream.until(lambda name, _: name == "show")
            assert bench.stop() == 0
            stream.until(lambda name, data: name == "daemon" and data == {"ok": False})
            status, _, body = web.request("GET", "/api/show")
            assert status == 502
            assert orjson.loads(body)["error"]["code"] == "daemon_unavailable"
            bench.start()
            stream.until(lambda name, data: name == "daemon" and data == {"ok": True})
            stream.until(lambda name, _: name == "show")
        finally:
            stream.close()
        assert web.proc.poll() is None


def test_a_refused_reference_is_told_to_every_subscriber(bench: Bench, tmp_path: Path) -> None:
    started(bench)
    with gateway(socket_of(bench), tmp_path / "t") as web:
        for _ in range(2):  # the first starts the feed; the second joins it after it stopped
            stream = EventStream(web, "/sse/show?ref=%28unclosed")
            try:
                _, error = stream.until(lambda name, _: name == "problem")
                assert error["code"] == "invalid_arguments"
                assert error["details"]["field"] == "ref"
            finally:
                stream.close()
        status, _, body = web.request("GET", "/sse/logs")  # no run named
        assert (status, body) == (400, b"bad request\n")
