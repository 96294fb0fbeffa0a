"""``[[notify]]`` webhooks from a real daemon to receivers on loopback (issue 16).

A settle is told once it is committed, to the targets whose ``on`` names it,
signed with the secret the daemon's environment holds; a receiver error is
retried with backoff and given up after ``attempts``; a dead receiver
(connection refused, or accepting and never answering) never holds up a run
or a ``show``; every attempt is an event naming the receiver's host, never its
URL.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_ops_metrics import scrape
from tests.support.agents import Bench, sloop_toml, start_with_args, ticket_text
from tests.support.daemon import free_loopback_port, query, wait_until
from tests.support.receiver import SECRET_PATH, Receiver

SECRET = "s3cret-for-tests"
SECRET_VAR = "TEST_NOTIFY_SECRET"
ALL_ON = ["merged", "failed", "needs_review", "aborted", "gate_changed"]


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    made: list[Receiver] = []
    yield made
    for receiver in made:
        receiver.close()


def receiver(made: list[Receiver], **options: Any) -> Receiver:
    new = Receiver(**options)
    made.append(new)
    return new


def notify_table(url: str, on: list[str], **keys: Any) -> str:
    lines = ["[[notify]]", f'url = "{url}"', "on = [" + ", ".join(f'"{n}"' for n in on) + "]"]
    lines += [
        f'{key} = "{value}"' if isinstance(value, str) else f"{key} = {value}"
        for key, value in keys.items()
    ]
    return "\n".join(lines) + "\n"


def agent(bench: Bench, *options: str) -> dict[str, Any]:
    return {"name": "implement", "action": "agent", "command": bench.argv(*options)}


def four_outcomes(bench: Bench, notify: str) -> None:
    """Tickets that settle merged, failed and needs_review, and one that waits to be aborted."""
    flows = {
        "failing": [agent(bench, "--exit", "1")],
        "review": [agent(bench, "--say", "done, no merge stage")],
        "stuck": [agent(bench, "--wait-for", bench.flag("never"))],
    }
    config = sloop_toml(
        bench.argv("--write", "{ticket}.txt=made"), flows=flows, parallel=4, extra=notify
    )
    bench.setup(
        config,
        {
            "good": ticket_text("Good"),
            "bad": ticket_text("Bad", flow="failing"),
            "review": ticket_text("Review", flow="review"),
            "stuck": ticket_text("Stuck", flow="stuck"),
        },
    )


def notify_events(bench: Bench) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    args: dict[str, Any] = {}
    while True:
        page = bench.ok("events", args)
        found += [e for e in page["events"] if e["kind"].startswith("notify_")]
        if not page["events"]:
            return found
        args = {"after": page["next_cursor"]}


def by_on(requests: list[Any]) -> dict[str, Any]:
    return {r.json()["on"]: r.json() for r in requests}


def test_every_configured_state_is_told_signed_and_recorded(
    bench: Bench, receivers: list[Receiver]
) -> None:
    everything = receiver(receivers)
    merges_only = receiver(receivers)
    tables = notify_table(
        everything.url,
        ALL_ON,
        secret_env=SECRET_VAR,
        link="https://ci.example/sloop/{run}?a={alias}",
    ) + notify_table(merges_only.url, ["merged"])
    four_outcomes(bench, tables)
    bench.env[SECRET_VAR] = SECRET
    bench.start()
    for name in ("good", "bad", "review", "stuck"):
        bench.post(name)
    runs = {name: bench.wait_run(f"{name}#1") for name in ("good", "bad", "review")}
    stuck = bench.wait_stage_running("stuck#1", "implement")
    bench.ok("abort", {"run": stuck["id"]})
    runs["stuck"] = bench.wait_run("stuck#1")
    bench.ok("pause", {"reason": "release freeze"})
    bench.ok("resume")

    told = everything.wait_for(6)
    bodies = by_on(told)
    assert sorted(bodies) == sorted(ALL_ON)
    for name, on in (
        ("good", "merged"),
        ("bad", "failed"),
        ("review", "needs_review"),
        ("stuck", "aborted"),
    ):
        run, body = runs[name], bodies[on]
        assert body["run"]["id"] == run["id"]
        assert body["run"]["alias"] == run["alias"]
        assert body["run"]["ticket"] == run["ticket"]
        assert body["run"]["ticket_name"] == name
        assert body["run"]["state"] == on == run["state"]
        assert body["run"]["reason"] == run["reason"]
        assert body["run"]["usage"] == run["usage"]
        assert body["link"] == f"https://ci.example/sloop/{run['id']}?a={name}%231"
        assert body["event"]["kind"] == ("run_aborted" if on == "aborted" else "run_finished")
        assert body["gate"] is None
        assert body["text"].startswith(f"{run['alias']} ({run['id']}) {on}")
    gates = [r.json() for r in told if r.json()["on"] == "gate_changed"]
    assert [(g["gate"]["from"], g["gate"]["state"]) for g in gates] == [
        ("open", "paused"),
        ("paused", "open"),
    ]
    assert gates[0]["gate"]["reason"] == "release freeze"
    assert gates[0]["run"] is None
    assert gates[0]["link"] is None  # the pattern names a run's field

    # Signed: the receiver's check passes with the secret and fails with another.
    for request in told:
        assert request.headers["content-type"] == "application/json"
        assert request.headers["x-sloop-event"] == request.json()["on"]
        assert request.headers["x-sloop-delivery"] == request.json()["delivery"]
        assert request.verifies(SECRET), request.headers
        assert not request.verifies("another secret")
        assert request.path == "/" + SECRET_PATH

    # The second table listens for merged only: nothing else reaches it, and no signature.
    only = merges_only.wait_for(1)
    time.sleep(0.3)
    assert [r.json()["on"] for r in merges_only.requests()] == ["merged"]
    assert "x-sloop-signature" not in only[0].headers

    # Each delivery is an event of the run it tells of; the host, never the URL's path.
    recorded = wait_until(lambda: len(found := notify_events(bench)) >= 7 and found)
    assert {e["kind"] for e in recorded} == {"notify_delivered"}
    for event in recorded:
        assert event["data"]["host"] == f"127.0.0.1:{everything.port}" or event["data"]["host"] == (
            f"127.0.0.1:{merges_only.port}"
        )
        assert event["data"]["status"] == 200
        assert event["data"]["attempt"] == 1
        assert SECRET_PATH not in str(event)
        assert SECRET not in str(event)
    aborted = [e for e in recorded if e["data"]["on"] == "aborted"]
    assert aborted[0]["run"] == runs["stuck"]["id"]
    assert aborted[0]["ticket"] == runs["stuck"]["ticket"]
    assert SECRET_PATH not in bench.log()
    assert SECRET not in bench.log()


def test_a_receiver_error_is_retried_and_given_up_after_the_attempts(
    bench: Bench, receivers: list[Receiver]
) -> None:
    flaky = receiver(receivers, statuses=[500])
    broken = receiver(receivers, then=503)
    refusing = receiver(receivers, then=404)
    elsewhere = receiver(receivers)
    redirecting = receiver(receivers, then=307, location=elsewhere.url)
    tables = (
        notify_table(redirecting.url, ["merged"], backoff="100ms")
        + notify_table(flaky.url, ["merged"], backoff="100ms")
        + notify_table(broken.url, ["merged"], backoff="100ms", attempts=3)
        + notify_table(refusing.url, ["merged"], backoff="100ms")
    )
    bench.setup(
        sloop_toml(bench.argv("--write", "a.txt=x"), extra=tables), {"one": ticket_text("One")}
    )
    bench.start()
    bench.post("one")
    run = bench.wait_run("one#1")
    assert run["state"] == "merged"

    first, second = flaky.wait_for(2)
    assert first.json() == second.json()  # the same delivery, the same body
    assert second.at - first.at >= 0.09  # after the backoff
    assert len(broken.wait_for(3)) == 3
    time.sleep(0.5)
    assert len(broken.requests()) == 3  # attempts = 3, then given up
    assert len(refusing.requests()) == 1  # a 404 is not worth another attempt
    assert len(redirecting.requests()) == 1
    assert elsewhere.requests() == []

    def ended() -> list[dict[str, Any]] | None:
        found = notify_events(bench)
        finals = [
            e for e in found if e["kind"] == "notify_delivered" or e["data"]["retry_in_ms"] is None
        ]
        return found if len(finals) == 4 else None

    events = wait_until(ended)
    port_of = {
        flaky.port: "flaky",
        broken.port: "broken",
        refusing.port: "refusing",
        redirecting.port: "redirecting",
    }
    story: dict[str, list[tuple[str, int, int | None]]] = {}
    for event in events:
        assert event["run"] == run["id"]
        who = port_of[int(event["data"]["host"].rsplit(":", 1)[1])]
        story.setdefault(who, []).append(
            (event["kind"], event["data"]["attempt"], event["data"]["status"])
        )
    assert story["flaky"] == [("notify_failed", 1, 500), ("notify_delivered", 2, 200)]
    assert story["broken"] == [("notify_failed", n, 503) for n in (1, 2, 3)]
    assert story["refusing"] == [("notify_failed", 1, 404)]
    assert story["redirecting"] == [("notify_failed", 1, 307)]
    (redirect,) = [e for e in events if e["data"]["status"] == 307]
    assert redirect["data"]["error"] == "HTTP 307: redirects are not followed"
    broken_events = [e for e in events if e["data"]["host"].endswith(f":{broken.port}")]
    assert [e["data"]["retry_in_ms"] for e in broken_events] == [100, 200, None]
    assert broken_events[-1]["data"]["error"] == "HTTP 503"
    assert broken_events[-1]["data"]["dropped"] is False


def test_a_dead_receiver_never_delays_a_run_or_a_show(
    bench: Bench, receivers: list[Receiver]
) -> None:
    silent = receiver(receivers, hang=True)
    nobody = free_loopback_port()
    tables = notify_table(silent.url, ALL_ON, timeout="1m", attempts=2) + notify_table(
        f"http://127.0.0.1:{nobody}/hook", ALL_ON, backoff="100ms", attempts=2
    )
    bench.setup(
        sloop_toml(bench.argv("--write", "{ticket}.txt=x"), extra=tables, parallel=2),
        {"one": ticket_text("One"), "two": ticket_text("Two")},
    )
    bench.start()
    bench.ok("pause", {"reason": "first a gate change nobody answers"})
    bench.ok("resume")
    silent.wait_for(1)  # a delivery now waits on a receiver that never answers
    bench.post("one")
    bench.post("two")
    # The runs settle and show answers at once while both targets fail.
    for name in ("one", "two"):
        assert bench.wait_run(f"{name}#1")["state"] == "merged"
    # Answered while the receiver holds its first request (a minute's timeout): a show
    # that waited on HTTP would outlast the test client's patience (10 s).
    for _ in range(20):
        assert bench.dashboard()["kind"] == "dashboard"
    assert len(silent.requests()) == 1  # still stuck on the first, in order

    def refused_twice() -> list[dict[str, Any]] | None:
        found = [e for e in notify_events(bench) if e["data"]["host"] == f"127.0.0.1:{nobody}"]
        finals = [e for e in found if e["data"]["retry_in_ms"] is None]
        return found if len(finals) == 4 else None  # two gate changes and two runs

    failures = wait_until(refused_twice, timeout=20)
    assert {e["data"]["error"] for e in failures} == {"connect failed: Connection refused"}
    assert all(e["data"]["status"] is None for e in failures)


def test_stopping_gives_pending_deliveries_a_grace_then_drops_and_records_them(
    bench: Bench, receivers: list[Receiver]
) -> None:
    silent = receiver(receivers, hang=True)
    bench.setup(
        sloop_toml(bench.argv(), extra=notify_table(silent.url, ["gate_changed"], timeout="1m")), {}
    )
    bench.start()
    for n in range(3):
        bench.ok("pause", {"reason": f"pause {n}"})
        bench.ok("resume")
    silent.wait_for(1)
    started = time.monotonic()
    assert bench.stop() == 0
    assert time.monotonic() - started < 10  # the grace is 2 s, far under the 1 m timeout
    rows = query(
        bench.state_dir,
        "SELECT json_extract(data, '$.dropped'), json_extract(data, '$.error'),"
        " json_extract(data, '$.attempt') FROM events WHERE kind = 'notify_failed'",
    )
    assert len(rows) == 6, rows
    assert all(dropped == 1 and error == "the daemon stopped" for dropped, error, _ in rows)
    assert [attempt for *_, attempt in rows] == [1, 0, 0, 0, 0, 0]  # one was in flight
    stopped = query(
        bench.state_dir, "SELECT max(position) FROM events WHERE kind = 'daemon_stopped'"
    )
    last_drop = query(
        bench.state_dir, "SELECT max(position) FROM events WHERE kind = 'notify_failed'"
    )
    assert last_drop[0][0] < stopped[0][0]


def test_slack_format_is_text_and_blocks_with_mentions_escaped(
    bench: Bench, receivers: list[Receiver]
) -> None:
    slack = receiver(receivers)
    table = notify_table(
        slack.url, ["merged", "gate_changed"], format="slack", link="https://ci.example/r/{run}"
    )
    bench.setup(
        sloop_toml(bench.argv("--write", "a.txt=x"), extra=table), {"one": ticket_text("One")}
    )
    bench.start()
    bench.post("one")
    run = bench.wait_run("one#1")
    bench.ok("pause", {"reason": "<!channel> freeze & hold"})
    merged, paused = (r.json() for r in slack.wait_for(2))
    assert set(merged) == {"text", "blocks"}
    assert merged["text"] == f"{run['alias']} ({run['id']}) merged"
    section, context = merged["blocks"]
    assert section["type"] == "section"
    assert section["text"]["type"] == "mrkdwn"
    assert f"<https://ci.example/r/{run['id']}|{run['alias']}>" in section["text"]["text"]
    assert context["type"] == "context"
    assert run["id"] in context["elements"][0]["text"]
    assert "&lt;!channel&gt; freeze &amp; hold" in paused["text"]
    assert "<!channel>" not in str(paused)


def test_https_is_delivered_and_its_certificate_checked(
    bench: Bench, receivers: list[Receiver], tmp_path: Path
) -> None:
    import ssl

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    openssl += ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    openssl += ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(openssl, check=True, capture_output=True, timeout=60)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    secure = receiver(receivers, tls=context)
    assert secure.url.startswith("https://")
    bench.setup(
        sloop_toml(bench.argv(), extra=notify_table(secure.url, ["gate_changed"], attempts=1)), {}
    )
    bench.start()  # the daemon does not trust the self-signed certificate
    bench.ok("pause")
    refused = wait_until(lambda: [e for e in notify_events(bench) if e["kind"] == "notify_failed"])
    assert refused[0]["data"]["error"].startswith("TLS certificate refused"), refused
    assert secure.requests() == []
    assert bench.stop() == 0

    bench.env["SSL_CERT_FILE"] = str(cert)  # now it does
    bench.start()
    bench.ok("resume")
    told = secure.wait_for(1)
    assert told[0].json()["gate"]["state"] == "open"
    delivered = wait_until(
        lambda: [e for e in notify_events(bench) if e["kind"] == "notify_delivered"]
    )
    assert delivered[0]["data"]["status"] == 200


def test_bad_tables_are_refused_naming_the_key_and_a_reload_applies_new_ones(
    bench: Bench, receivers: list[Receiver]
) -> None:
    first, second = receiver(receivers), receiver(receivers)
    bench.setup(sloop_toml(bench.argv(), extra=notify_table(first.url, ["gate_changed"])), {})

    bench.write_config(sloop_toml(bench.argv(), extra=notify_table(first.url, ["merge"])))
    assert bench.daemon is None
    from tests.support.daemon import new_daemon

    refused = new_daemon(bench.root, bench.repo)
    code, _, logged = refused.run_to_exit()
    assert code != 0
    assert "'notify[0].on[0]': 'merge' is not one of merged" in logged
    bench.write_config(
        sloop_toml(bench.argv(), extra=notify_table(first.url, ALL_ON, secret_env=SECRET_VAR))
    )
    code, _, logged = refused.run_to_exit()
    assert code != 0
    assert f"'notify[0].secret_env' names {SECRET_VAR}" in logged

    bench.write_config(sloop_toml(bench.argv(), extra=notify_table(first.url, ["gate_changed"])))
    bench.start()
    assert bench.daemon is not None
    bench.ok("pause")
    assert first.wait_for(1)[0].json()["gate"]["state"] == "paused"

    # A bad reload keeps the last good tables; a good one applies to the next event.
    bench.write_config(sloop_toml(bench.argv(), extra=notify_table("ftp://x/", ["gate_changed"])))
    bench.daemon.signal(signal.SIGHUP)
    wait_until(lambda: "reload refused" in bench.log())
    assert "'notify[0].url' must be an http:// or https:// URL" in bench.log()
    bench.ok("resume")
    assert len(first.wait_for(2)) == 2
    bench.write_config(sloop_toml(bench.argv(), extra=notify_table(second.url, ["gate_changed"])))
    bench.daemon.signal(signal.SIGHUP)
    wait_until(lambda: bench.log().count("configuration reloaded") >= 1)
    bench.ok("pause")
    assert second.wait_for(1)[0].json()["gate"]["state"] == "paused"
    time.sleep(0.3)
    assert len(first.requests()) == 2


def test_deliveries_are_counted_for_prometheus(bench: Bench, receivers: list[Receiver]) -> None:
    flaky = receiver(receivers, statuses=[500], then=200)
    port = free_loopback_port()
    bench.setup(
        sloop_toml(bench.argv(), extra=notify_table(flaky.url, ["gate_changed"], backoff="100ms")),
        {},
    )
    start_with_args(bench, "--metrics", f"127.0.0.1:{port}")
    before = scrape(port)
    assert before.value("sloop_notify_deliveries_total", outcome="delivered") == 0
    assert before.value("sloop_notify_deliveries_total", outcome="dropped") == 0
    bench.ok("pause")
    wait_until(
        lambda: scrape(port).value("sloop_notify_deliveries_total", outcome="delivered") == 1
    )
    after = scrape(port)
    assert after.value("sloop_notify_attempt_failures_total") == 1
    assert after.value("sloop_notify_deliveries_total", outcome="failed") == 0
    # No URL or host is a label.
    assert all("127.0.0.1" not in str(labels) for (_name, labels) in after.samples)
