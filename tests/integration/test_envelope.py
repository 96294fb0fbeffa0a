"""The envelope on a real operator socket: every error path, framing, order, load.

One daemon serves the whole module (requests are stateless); the tests that
need their own server (a verb that raises) run one in-process.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sloopd.server
from sloopd.server import ServeOptions, Server
from sloopd.verbs import operator_handlers
from sloopd.wire import api
from sloopd.wire.dispatch import Handler, OperatorDispatcher
from tests.support.daemon import Client, DaemonProcess, make_repo, new_daemon, short_tmpdir

LIMIT = api.MAX_REQUEST_BYTES
SHOW = {"v": 1, "id": "s", "verb": "show", "args": {}}
STATUS_KEYS = {"daemon", "gate", "runs", "queued_triggers", "tickets"}
# usage: additive in 0.6.0, epoch in 0.7.0, attention in 0.8.0 (none is a status field).
DASHBOARD_KEYS = STATUS_KEYS | {"kind", "recent", "recent_total", "recent_limit", "usage", "epoch"}
DASHBOARD_KEYS |= {"attention", "attention_total"}


@pytest.fixture(scope="module")
def served() -> Iterator[DaemonProcess]:
    root = short_tmpdir()
    process = new_daemon(root, make_repo(root)).start()
    try:
        yield process
    finally:
        code = process.stop()
        shutil.rmtree(root, ignore_errors=True)
        assert code == 0, process.log()


@pytest.fixture
def client(served: DaemonProcess) -> Iterator[Client]:
    assert served.socket is not None
    conn = Client(served.socket)
    try:
        yield conn
    finally:
        conn.close()
        assert served.alive(), served.log()


def assert_error(response: dict[str, Any], code: str, request_id: api.RequestId) -> dict[str, Any]:
    """Exactly {id, ok: false, error: {code, message, details}}; returns details."""
    assert set(response) == {"id", "ok", "error"}, response
    assert response["ok"] is False
    assert response["id"] == request_id
    error = response["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert error["code"] == code, response
    assert isinstance(error["message"], str)
    assert error["message"]
    assert isinstance(error["details"], dict)
    details: dict[str, Any] = error["details"]
    return details


def assert_ok(response: dict[str, Any], request_id: api.RequestId) -> Any:
    assert set(response) == {"id", "ok", "data"}, response
    assert response["ok"] is True
    assert response["id"] == request_id
    return response["data"]


def assert_dashboard(data: dict[str, Any], recent_limit: int = 10) -> None:
    assert set(data) == DASHBOARD_KEYS, sorted(data)
    assert data["kind"] == "dashboard"
    assert data["gate"] == {"state": "open", "until_ms": None, "reason": None}
    assert data["runs"] == []
    assert data["tickets"] == []
    assert data["recent"] == []
    assert data["queued_triggers"] == []
    assert "queued_activations" not in data
    assert data["recent_total"] == 0
    assert data["recent_limit"] == recent_limit


def request(**fields: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"v": 1, "id": "r", "verb": "show", "args": {}}
    message.update(fields)
    return {k: v for k, v in message.items() if v is not DROP}


DROP: Any = object()


# --- the dashboard and status -----------------------------------------------------


def test_show_without_arguments_is_the_dashboard(served: DaemonProcess, client: Client) -> None:
    data = assert_ok(client.request(SHOW), "s")
    assert_dashboard(data)
    daemon = data["daemon"]
    assert daemon["version"] == api.SOFTWARE_VERSION
    assert daemon["protocol"] == 1
    assert served.proc is not None
    assert daemon["pid"] == served.proc.pid
    assert daemon["socket"] == str(served.socket)
    assert daemon["repo"] == os.path.realpath(served.repo)
    assert daemon["store"] == "ok"
    assert daemon["reason"] is None


def test_status_answers_the_status_fields(client: Client) -> None:
    data = client.ok("status")
    assert set(data) == STATUS_KEYS
    assert data["gate"] == {"state": "open", "until_ms": None, "reason": None}
    assert data["queued_triggers"] == []
    assert "queued_activations" not in data


@pytest.mark.parametrize(("args", "expected"), [({"limit": 3}, 3), ({"limit": 1}, 1)])
def test_show_limit_sets_recent_limit(client: Client, args: dict[str, Any], expected: int) -> None:
    assert_dashboard(client.ok("show", args), recent_limit=expected)


def test_explicit_nulls_mean_absent(client: Client) -> None:
    assert_dashboard(client.ok("show", {"ref": None, "limit": None}))


def test_unknown_envelope_fields_are_ignored(client: Client) -> None:
    data = assert_ok(client.request(request(id=9, trace="x", meta={"a": [1]})), 9)
    assert data["kind"] == "dashboard"


def test_token_may_be_omitted_or_null(client: Client) -> None:
    assert_ok(client.request(request(token=None)), "r")
    assert_ok(client.request(request(token=DROP)), "r")


# --- envelope errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        b"{",
        b"not json",
        b'{"v": 1, "id": "x",}',
        b"\xff\xfe\xfd",
        b"[" * 5000,
        b'{"v": NaN}',
        b"'single'",
    ],
)
def test_malformed_json_is_invalid_request_with_null_id(client: Client, line: bytes) -> None:
    client.send_raw(line + b"\n")
    assert_error(client.read(), "invalid_request", None)
    assert_ok(client.request(SHOW), "s")  # the connection still works


@pytest.mark.parametrize("value", [[], [SHOW], 1, 2.5, "show", None, True])
def test_a_non_object_is_invalid_request(client: Client, value: Any) -> None:
    assert_error(client.request(value), "invalid_request", None)


@pytest.mark.parametrize("version", [DROP, True, "1", 1.5, None, [1]])
def test_a_missing_or_non_integer_version_is_invalid_request(client: Client, version: Any) -> None:
    details = assert_error(client.request(request(v=version, id="q")), "invalid_request", "q")
    assert details == {"field": "v"}


@pytest.mark.parametrize("version", [0, 2, -1, 10**12])
def test_another_version_is_unsupported_and_lists_1(client: Client, version: int) -> None:
    response = client.request(request(v=version, id="q", verb=DROP, args=DROP))
    assert assert_error(response, "unsupported_version", "q") == {"supported": [1]}


def test_the_version_is_checked_before_the_rest(client: Client) -> None:
    response = client.request({"v": 2, "id": True, "verb": 5, "args": []})
    assert assert_error(response, "unsupported_version", None) == {"supported": [1]}
    response = client.request({"v": "1", "id": "z", "verb": 5})
    assert assert_error(response, "invalid_request", "z") == {"field": "v"}


@pytest.mark.parametrize("request_id", [DROP, None, True, False, 1.5, {"a": 1}, ["a"]])
def test_a_bad_id_is_invalid_request_answered_with_null(client: Client, request_id: Any) -> None:
    details = assert_error(client.request(request(id=request_id)), "invalid_request", None)
    assert details == {"field": "id"}


@pytest.mark.parametrize("request_id", ["", "req-1", 0, 42, -7, 2**62])
def test_string_and_integer_ids_are_echoed(client: Client, request_id: str | int) -> None:
    assert_ok(client.request(request(id=request_id)), request_id)


@pytest.mark.parametrize("verb", [DROP, None, 3, ["show"]])
def test_a_missing_or_non_string_verb_is_invalid_request(client: Client, verb: Any) -> None:
    details = assert_error(client.request(request(verb=verb, id=5)), "invalid_request", 5)
    assert details == {"field": "verb"}


@pytest.mark.parametrize("verb", ["", "SHOW", "frobnicate", "activate"])
def test_an_unknown_verb_is_unknown_verb_with_the_id(client: Client, verb: str) -> None:
    details = assert_error(client.request(request(verb=verb, id="u")), "unknown_verb", "u")
    assert "show" in details["verbs"]


@pytest.mark.parametrize("args", [DROP, None, [], "x", 3])
def test_args_must_be_an_object(client: Client, args: Any) -> None:
    details = assert_error(client.request(request(args=args, id="a")), "invalid_request", "a")
    assert details == {"field": "args"}


def test_a_token_on_the_operator_socket_is_unauthorized(client: Client) -> None:
    assert_error(client.request(request(token="tok-1", id="t")), "unauthorized", "t")
    assert_error(client.request(request(token="", id="t")), "unauthorized", "t")


@pytest.mark.parametrize(
    ("verb", "args"),
    [("brief", {}), ("note", {"text": "hi"}), ("verdict", {"verdict": "pass"}), ("note", {})],
)
def test_worker_verbs_are_unauthorized_on_the_operator_socket(
    client: Client, verb: str, args: dict[str, Any]
) -> None:
    assert_error(client.request(request(verb=verb, args=args, id="w")), "unauthorized", "w")


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"bogus": 1}, "bogus"),
        ({"limit": 2, "zzz": None}, "zzz"),
        ({"activation": {}}, "activation"),
        ({"limit": True}, "limit"),
        ({"limit": 0}, "limit"),
        ({"limit": -1}, "limit"),
        ({"limit": "3"}, "limit"),
        ({"limit": 2.5}, "limit"),
        ({"ref": ""}, "ref"),
        ({"ref": 7}, "ref"),
    ],
)
def test_bad_show_arguments_are_invalid_arguments(
    client: Client, args: dict[str, Any], field: str
) -> None:
    response = client.request(request(args=args, id="x"))
    assert assert_error(response, "invalid_arguments", "x")["field"] == field


@pytest.mark.parametrize(
    ("verb", "args", "field"),
    [
        ("hold", {}, "ref"),
        ("hold", {"ref": "T1", "force": True}, "force"),
        ("post", {"path": "a.md", "activation": {"at_ms": 1}}, "activation"),
        ("run", {"ref": "a", "trigger": {"at_ms": -5}}, "trigger.at_ms"),
        ("logs", {"run": "R1", "tail": 0}, "tail"),
        ("status", {"x": 1}, "x"),
        ("wait", {"run": "R1", "timeout_ms": -1}, "timeout_ms"),
    ],
)
def test_other_verbs_reject_bad_arguments_before_running(
    client: Client, verb: str, args: dict[str, Any], field: str
) -> None:
    response = client.request(request(verb=verb, args=args, id=1))
    assert assert_error(response, "invalid_arguments", 1)["field"] == field


# --- framing ------------------------------------------------------------------------


def test_blank_lines_are_ignored(client: Client) -> None:
    client.send_raw(b"\n\n   \n\t\r\n" + orjson.dumps(request(id="after")) + b"\n\n")
    assert_ok(client.read(), "after")
    client.send_raw(b"\n")
    assert_ok(client.request(request(id="next")), "next")
    # A line of whitespace alone in its read (the daemon's one-line path): no answer.
    client.send_raw(b" \t\r\x0b\x0c\n")
    assert_ok(client.request(request(id="last")), "last")


def test_crlf_line_endings_are_accepted(client: Client) -> None:
    client.send_raw(orjson.dumps(request(id="crlf")) + b"\r\n")
    assert_ok(client.read(), "crlf")


def test_a_2mib_line_gets_one_error_and_the_connection_keeps_working(client: Client) -> None:
    client.send_raw(b"x" * (2 * LIMIT) + b"\n" + orjson.dumps(request(id="ok")) + b"\n")
    details = assert_error(client.read(), "invalid_request", None)
    assert details == {"limit_bytes": 1048576}
    assert_ok(client.read(), "ok")


def test_an_overlong_request_is_rejected_even_if_it_is_valid_json(client: Client) -> None:
    padded = request(id="long", pad="x" * (2 * LIMIT))
    client.send_raw(orjson.dumps(padded) + b"\n")
    assert_error(client.read(), "invalid_request", None)
    assert_ok(client.request(request(id="ok")), "ok")


def padded_request(size: int, request_id: str) -> bytes:
    """A valid show request of exactly ``size`` bytes (without its newline)."""
    bare = orjson.dumps(request(id=request_id, pad=""))
    line = orjson.dumps(request(id=request_id, pad="x" * (size - len(bare))))
    assert len(line) == size
    return line


def test_the_limit_is_exact(client: Client) -> None:
    client.send_raw(padded_request(LIMIT, "at-limit") + b"\n")
    assert_ok(client.read(), "at-limit")
    client.send_raw(padded_request(LIMIT + 1, "over") + b"\n")
    assert assert_error(client.read(), "invalid_request", None) == {"limit_bytes": LIMIT}
    assert_ok(client.request(request(id="then")), "then")


def test_an_overlong_line_is_answered_before_it_ends_and_its_rest_skipped(client: Client) -> None:
    client.send_raw(b'{"v": 1, "id": "huge", "pad": "' + b"y" * (LIMIT + LIMIT // 2))
    assert assert_error(client.read(), "invalid_request", None) == {"limit_bytes": LIMIT}
    # The rest of that line (however long) is dropped without another answer.
    client.send_raw(b"z" * LIMIT + b'"}\n' + orjson.dumps(request(id="next")) + b"\n")
    assert_ok(client.read(), "next")


def test_several_overlong_lines_each_get_one_error(client: Client) -> None:
    big = b"q" * (LIMIT + 10) + b"\n"
    client.send_raw(big + big + orjson.dumps(request(id="end")) + b"\n")
    assert_error(client.read(), "invalid_request", None)
    assert_error(client.read(), "invalid_request", None)
    assert_ok(client.read(), "end")


def test_a_last_request_without_newline_is_answered_after_half_close(
    served: DaemonProcess,
) -> None:
    assert served.socket is not None
    conn = Client(served.socket)
    try:
        conn.send_raw(orjson.dumps(request(id="first")) + b"\n" + orjson.dumps(request(id="last")))
        conn.sock.shutdown(socket.SHUT_WR)
        assert_ok(conn.read(), "first")
        assert_ok(conn.read(), "last")
        assert conn.read_raw() == b""  # then the daemon closes its side
    finally:
        conn.close()


def test_a_half_close_after_a_bad_last_line_still_answers(served: DaemonProcess) -> None:
    assert served.socket is not None
    conn = Client(served.socket)
    try:
        conn.send_raw(b'{"v": 1, "id": "cut"')
        conn.sock.shutdown(socket.SHUT_WR)
        assert_error(conn.read(), "invalid_request", None)
        assert conn.read_raw() == b""
    finally:
        conn.close()


def test_pipelined_requests_are_answered_in_order(client: Client) -> None:
    lines = []
    expected: list[tuple[api.RequestId, bool]] = []
    for n in range(300):
        if n % 7 == 3:
            lines.append(orjson.dumps(request(id=n, verb="nope")))
            expected.append((n, False))
        elif n % 11 == 5:
            lines.append(b"{broken")
            expected.append((None, False))
        elif n % 13 == 0:
            lines.append(orjson.dumps(request(id=n, verb="status")))
            expected.append((n, True))
        else:
            lines.append(orjson.dumps(request(id=f"p{n}", args={"limit": 1 + n % 5})))
            expected.append((f"p{n}", True))
        if n % 17 == 0:
            lines.append(b"")  # a blank line: no answer
    client.send_raw(b"\n".join(lines) + b"\n")
    answers = [client.read() for _ in expected]
    assert [(a["id"], a["ok"]) for a in answers] == expected


def test_many_connections_at_once_are_all_answered(served: DaemonProcess) -> None:
    assert served.socket is not None
    path = served.socket
    clients = 50
    barrier = threading.Barrier(clients)

    def session(n: int) -> list[api.RequestId]:
        conn = Client(path)
        try:
            barrier.wait(timeout=30)
            ids: list[api.RequestId] = []
            for k in range(10):
                response = conn.request(request(id=f"c{n}-{k}", args={"limit": 1 + k}))
                assert response["data"]["recent_limit"] == 1 + k
                ids.append(response["id"])
            return ids
        finally:
            conn.close()

    with ThreadPoolExecutor(max_workers=clients) as pool:
        results = list(pool.map(session, range(clients)))
    assert results == [[f"c{n}-{k}" for k in range(10)] for n in range(clients)]
    assert served.alive()


def test_a_client_that_disconnects_mid_request_does_not_hurt(served: DaemonProcess) -> None:
    assert served.socket is not None
    for payload in (b'{"v": 1, "id": "gone"', orjson.dumps(SHOW) + b"\n" * 3, b"x" * LIMIT):
        conn = Client(served.socket)
        conn.send_raw(payload)
        conn.close()
    conn = Client(served.socket)
    try:
        assert_ok(conn.request(request(id="still")), "still")
    finally:
        conn.close()
    assert served.alive()


# --- the protocol text's shell client ------------------------------------------------------


def nc_path() -> str:
    path = shutil.which("nc")
    if path is None:
        pytest.fail("nc is not installed; `make test` installs netcat-openbsd")
    return path


def test_the_protocol_texts_shell_client(served: DaemonProcess) -> None:
    nc_path()
    script = (
        """printf '%s\\n' '{"v":1,"id":"1","verb":"show","args":{}}' | nc -N -U "$SOCK" """
        "| head -1"
    )
    done = subprocess.run(
        ["sh", "-c", script],
        env={**os.environ, "SOCK": str(served.socket)},
        capture_output=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    assert_dashboard(assert_ok(orjson.loads(lines[0]), "1"))


def test_the_protocol_texts_shell_client_verbatim(served: DaemonProcess) -> None:
    """Without -N, Debian's nc keeps the socket open; the first line still comes."""
    nc_path()
    script = (
        """printf '%s\\n' '{"v":1,"id":"1","verb":"show","args":{}}' """
        """| nc -U "$OPERATOR_SOCKET" | head -1"""
    )
    proc = subprocess.Popen(
        ["sh", "-c", script],
        env={**os.environ, "OPERATOR_SOCKET": str(served.socket)},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
    assert_dashboard(assert_ok(orjson.loads(first), "1"))


# --- the dispatcher without a socket ------------------------------------------------------


def _echo(args: dict[str, Any]) -> dict[str, Any]:
    return {"args": args}


@settings(max_examples=300)
@given(
    st.binary(max_size=200)
    | st.builds(
        lambda m: orjson.dumps(m),
        st.dictionaries(
            st.sampled_from(["v", "id", "verb", "args", "token", "x"]),
            st.none()
            | st.booleans()
            | st.integers(-3, 3)
            | st.sampled_from(["show", "status", "note", "nope", "1"])
            | st.dictionaries(st.sampled_from(["limit", "ref", "q"]), st.integers(-1, 2)),
        ),
    )
)
def test_any_line_gets_exactly_one_well_formed_envelope(line: bytes) -> None:
    reply = OperatorDispatcher({"show": _echo, "status": _echo}).handle_line(line)
    assert isinstance(reply, bytes)
    assert reply.endswith(b"\n")
    assert reply.count(b"\n") == 1
    envelope = orjson.loads(reply)
    if envelope["ok"]:
        assert set(envelope) == {"id", "ok", "data"}
    else:
        assert set(envelope) == {"id", "ok", "error"}
        assert set(envelope["error"]) == {"code", "message", "details"}
        assert envelope["error"]["code"] in {str(c) for c in api.ErrorCode}
    try:
        sent = orjson.loads(line)
    except orjson.JSONDecodeError:
        sent = None
    assert envelope["id"] == api.readable_id(sent)


# --- a verb that fails: an in-process server with a patched handler ------------------------


class Boom(RuntimeError):
    pass


def failing_handlers(real: Callable[..., dict[str, Handler]]) -> Callable[..., dict[str, Handler]]:
    """The real handlers, with `show ref=...` misbehaving in every way a verb can."""

    def patched(*args: Any) -> dict[str, Handler]:
        handlers = dict(real(*args))
        show = handlers["show"]

        async def late_failure() -> Any:
            await asyncio.sleep(0.01)
            raise Boom("async")

        async def late_value(value: Any) -> Any:
            await asyncio.sleep(0.05)
            return value

        def misbehaving(args: dict[str, Any]) -> Any:
            mode = args.get("ref")
            if mode == "raise":
                raise Boom("sync")
            if mode == "raise-later":
                return late_failure()
            if mode == "unencodable":
                return {"blob": {1, 2}}
            if mode == "unencodable-later":
                return late_value({"blob": {3}})
            if mode == "slow":
                return late_value({"slow": True})
            return show(args)

        handlers["show"] = misbehaving
        return handlers

    return patched


@pytest.fixture
def in_process(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[Callable[[Path], None]], None]]:
    """Run a real Server on this thread's event loop; the test body runs in a thread."""
    root = short_tmpdir()
    repo = make_repo(root)
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.setattr(sloopd.server, "operator_handlers", failing_handlers(operator_handlers))

    def run(body: Callable[[Path], None]) -> None:
        server = Server(ServeOptions(repo=repo, state_dir=root / "state", socket_dir=root / "s"))

        async def main() -> None:
            serving = asyncio.ensure_future(server.serve())
            await asyncio.wait_for(server.ready.wait(), 15)
            try:
                await asyncio.to_thread(body, server.layout.operator_socket)
            finally:
                server.request_stop()
                await serving

        asyncio.run(main())
        assert not server.layout.operator_socket.exists()

    try:
        yield run
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_an_exception_inside_a_verb_is_internal_and_the_daemon_stays_up(
    in_process: Callable[[Callable[[Path], None]], None],
) -> None:
    def body(path: Path) -> None:
        conn = Client(path)
        try:
            for n, mode in enumerate(["raise", "raise-later", "unencodable", "unencodable-later"]):
                response = conn.request(request(id=n, args={"ref": mode}))
                assert_error(response, "internal", n)
                assert "Boom" not in response["error"]["message"]
                assert_dashboard(assert_ok(conn.request(request(id="after")), "after"))
        finally:
            conn.close()
        with_new = Client(path)
        try:
            assert_ok(with_new.request(request(id="fresh")), "fresh")
        finally:
            with_new.close()

    in_process(body)


def test_replies_keep_request_order_behind_a_slow_verb(
    in_process: Callable[[Callable[[Path], None]], None],
) -> None:
    def body(path: Path) -> None:
        conn = Client(path)
        try:
            lines = [
                request(id=1, args={"ref": "slow"}),
                request(id=2),
                request(id=3, args={"ref": "raise-later"}),
                request(id=4, verb="nope"),
                request(id=5, args={"ref": "slow"}),
                request(id=6),
            ]
            conn.send_raw(b"".join(orjson.dumps(m) + b"\n" for m in lines) + b"{bad\n")
            answers = [conn.read() for _ in range(7)]
            assert [a["id"] for a in answers] == [1, 2, 3, 4, 5, 6, None]
            assert [a["ok"] for a in answers] == [True, True, False, False, True, True, False]
            assert answers[0]["data"] == {"slow": True}
            # The half-close path waits for the queued slow reply too.
            conn.send_raw(orjson.dumps(request(id=8, args={"ref": "slow"})))
            conn.sock.shutdown(socket.SHUT_WR)
            assert_ok(conn.read(), 8)
            assert conn.read_raw() == b""
        finally:
            conn.close()

    in_process(body)
