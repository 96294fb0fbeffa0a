"""``[[notify]]`` tables, bodies, signatures and the bounded delivery lanes, in process.

The daemon's part (what is told, when, and what is recorded) is
tests/integration/test_notify_webhooks.py; here: every refusal names its key,
the Slack body escapes what could mention or link, and a lane to a receiver
that never answers holds at most its queue limit and drops (and reports) the rest.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest

from sloopctl import init_template
from sloopd.core import config
from sloopd.ops.webhook_body import REASON_MAX, Notice, encode, json_body, slack_body
from sloopd.ops.webhook_targets import BACKOFF_CAP_MS, Target, parse_targets
from sloopd.ops.webhooks import Deliveries, Delivery, Outcome, headers_for, signature
from sloopd.queue import tickets
from sloopd.wire import api
from tests.support.receiver import Receiver
from tests.unit.test_init_template import uncommented

URL = "https://hooks.example/services/T0/B0/XyZ"


def target(**keys: Any) -> Target:
    table = {"url": URL, "on": ["merged"], **keys}
    return parse_targets([table], {"HOOK_SECRET": "k"})[0]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"on": ["merged"]}, "'notify[0].url' is required"),
        ({"url": URL}, "'notify[0].on' is required"),
        ({"url": URL, "on": []}, "'notify[0].on' must be a non-empty list"),
        ({"url": URL, "on": "merged"}, "'notify[0].on' must be a non-empty list"),
        ({"url": URL, "on": ["merge"]}, "'notify[0].on[0]': 'merge' is not one of merged"),
        ({"url": URL, "on": ["merged", "merged"]}, "'notify[0].on' names a state twice"),
        ({"url": "ftp://x/", "on": ["merged"]}, "'notify[0].url' must be an http:// or https://"),
        ({"url": "https:///x", "on": ["merged"]}, "'notify[0].url' has no host"),
        ({"url": "http://h:99999/", "on": ["merged"]}, "'notify[0].url' is not a valid URL"),
        ({"url": "http://h/a b", "on": ["merged"]}, "'notify[0].url' must not contain spaces"),
        ({"url": 3, "on": ["merged"]}, "'notify[0].url' must be a non-empty string"),
        ({"url": URL, "on": ["merged"], "hook": 1}, "unknown key 'notify[0].hook'"),
        ({"url": URL, "on": ["merged"], "format": "xml"}, "'notify[0].format' must be one of"),
        ({"url": URL, "on": ["merged"], "secret_env": "NOPE_UNSET"}, "names NOPE_UNSET, which"),
        ({"url": URL, "on": ["merged"], "secret_env": "EMPTY"}, "names EMPTY, which"),
        ({"url": URL, "on": ["merged"], "secret_env": "a-b"}, "must be the name of an environment"),
        ({"url": URL, "on": ["merged"], "link": "https://x/{nope}"}, "unknown field {nope}"),
        ({"url": URL, "on": ["merged"], "link": "https://x/{run!r}"}, "is not a plain {field}"),
        ({"url": URL, "on": ["merged"], "link": "https://x/{"}, "'notify[0].link'"),
        ({"url": URL, "on": ["merged"], "link": "javascript:{run}"}, "must be an http:// or"),
        ({"url": URL, "on": ["merged"], "attempts": 0}, "'notify[0].attempts' must be an integer"),
        ({"url": URL, "on": ["merged"], "attempts": True}, "'notify[0].attempts' must be"),
        ({"url": URL, "on": ["merged"], "attempts": 11}, "from 1 to 10"),
        ({"url": URL, "on": ["merged"], "backoff": "5ms"}, "'notify[0].backoff' must be from"),
        ({"url": URL, "on": ["merged"], "timeout": "2m"}, "'notify[0].timeout' must be from"),
        ({"url": URL, "on": ["merged"], "timeout": 5}, "'notify[0].timeout': must be a duration"),
    ],
)
def test_a_bad_table_is_refused_naming_its_key(table: dict[str, Any], message: str) -> None:
    document = {"notify": [{"url": URL, "on": ["failed"]}, table]}
    expected = message.replace("notify[0]", "notify[1]")
    with pytest.raises(config.ConfigError) as refused:
        config.parse(document, environ={"EMPTY": ""})
    assert expected in str(refused.value)


def test_notify_must_be_an_array_of_tables() -> None:
    for value in ({"url": URL}, ["x"], "x"):
        with pytest.raises(config.ConfigError, match=r"'notify' must be an array of tables"):
            config.parse({"notify": value}, environ={})


def test_a_table_takes_its_defaults_and_its_secret_from_the_environment() -> None:
    parsed = config.parse(
        {"notify": [{"url": URL, "on": ["merged", "gate_changed"], "secret_env": "HOOK"}]},
        environ={"HOOK": "hunter2"},
    )
    (only,) = parsed.notify
    assert (only.format, only.attempts, only.backoff_ms, only.timeout_ms) == (
        "json",
        4,
        2000,
        10000,
    )
    assert only.on == {"merged", "gate_changed"}
    assert only.secret == "hunter2"
    assert "hunter2" not in repr(only)
    assert "hunter2" not in repr(parsed)
    assert only.host == "hooks.example"
    assert target(url="http://127.0.0.1:8080/x").host == "127.0.0.1:8080"
    assert target(url="http://[::1]:9/x").host == "[::1]:9"
    assert config.parse({}).notify == ()


def test_the_backoff_doubles_up_to_its_cap() -> None:
    hook = target(backoff="1s")
    assert [hook.retry_delay_ms(n) for n in (1, 2, 3)] == [1000, 2000, 4000]
    assert hook.retry_delay_ms(9) == BACKOFF_CAP_MS


def run_notice(reason: str | None = "stage 'test' failed", **run: Any) -> Notice:
    facts = {
        "id": "R4",
        "alias": "fix-login#1",
        "ticket": "T7",
        "ticket_name": "fix-login",
        "attempt": 1,
        "state": "failed",
        "reason": reason,
        "usage": {"input_tokens": 1000, "output_tokens": 234, "cached_tokens": 0, "cost_usd": 0.5},
        **run,
    }
    return Notice("failed", "17", "run_finished", 1_796_131_478_188, "repo", run=facts)


def test_the_link_fills_in_run_fields_percent_encoded() -> None:
    hook = target(link="https://ci.example/sloop/{run}?alias={alias}&t={ticket_name}")
    body = json_body(hook, run_notice(), "d1")
    assert body["link"] == "https://ci.example/sloop/R4?alias=fix-login%231&t=fix-login"
    gate = Notice("gate_changed", "18", "gate_changed", 0, "repo", gate={"from": "open"})
    assert json_body(hook, gate, "d2")["link"] is None
    assert json_body(target(link="https://ci.example/sloop"), gate, "d3")["link"] == (
        "https://ci.example/sloop"
    )


def test_the_json_body_names_the_event_and_cuts_long_reasons() -> None:
    body = orjson.loads(encode(target(), run_notice("x" * 5000), "d1"))
    assert body["version"] == 1
    assert body["delivery"] == "d1"
    assert body["on"] == "failed"
    assert body["event"] == {
        "cursor": "17",
        "kind": "run_finished",
        "at_ms": 1_796_131_478_188,
        "at": "2026-12-01T13:24:38.188Z",
    }
    assert len(body["run"]["reason"]) == REASON_MAX
    assert body["run"]["reason"].endswith("…")
    assert body["text"].startswith("fix-login#1 (R4) failed: xxx")


def test_the_slack_body_escapes_what_could_mention_or_link() -> None:
    hook = target(format="slack", link="https://ci.example/{run}")
    hostile = run_notice("<!channel> see <https://evil.example|here> & more")
    body = slack_body(hook, hostile)
    assert set(body) == {"text", "blocks"}
    flat = orjson.dumps(body).decode()
    assert "<!channel>" not in flat
    assert "<https://evil.example" not in flat
    assert "&lt;!channel&gt;" in body["text"]
    assert "&amp; more" in body["text"]
    section = body["blocks"][0]["text"]["text"]
    assert section.startswith(
        ":x: *<https://ci.example/R4|fix-login#1>* failed\n> &lt;!channel&gt;"
    )
    assert (
        body["blocks"][1]["elements"][0]["text"] == "repo · R4 · ticket T7 · 1,234 tokens · $0.50"
    )


def test_the_signature_is_the_hmac_of_the_timestamp_and_the_body() -> None:
    hook = target(secret_env="HOOK_SECRET")
    delivery = Delivery("d1", hook, "merged", "17", "T1", "R1", b'{"a":1}')
    headers = headers_for(delivery, 1_796_131_478)
    expected = hmac.new(b"k", b'1796131478.{"a":1}', hashlib.sha256).hexdigest()
    assert (
        headers["X-Sloop-Signature"]
        == f"sha256={expected}"
        == signature("k", 1_796_131_478, b'{"a":1}')
    )
    assert headers["X-Sloop-Timestamp"] == "1796131478"
    assert headers["X-Sloop-Delivery"] == "d1"
    assert "X-Sloop-Signature" not in headers_for(
        Delivery("d", target(), "merged", "1", None, None, b""), 1
    )


def test_a_dead_receiver_holds_at_most_the_queue_limit_and_the_rest_is_dropped() -> None:
    silent = Receiver(hang=True)
    outcomes: list[Outcome] = []
    hook = parse_targets([{"url": silent.url, "on": ["merged"], "timeout": "1m"}], {})[0]

    async def scenario() -> tuple[int, int, int]:
        lanes = Deliveries(outcomes.append, queue_limit=3)
        for n in range(10):
            lanes.submit(Delivery(f"d{n}", hook, "merged", str(n), None, None, b"{}"))
        waiting = lanes.pending()
        await asyncio.to_thread(silent.wait_for, 1)  # the first is in flight, unanswered
        dropped = await lanes.close(0.2)
        lanes.submit(Delivery("late", hook, "merged", "99", None, None, b"{}"))
        return waiting, dropped, lanes.pending()

    try:
        waiting, dropped, left = asyncio.run(scenario())
    finally:
        silent.close()
    assert (waiting, dropped, left) == (3, 3, 0)
    assert len(silent.requests()) == 1
    assert [(o.delivery.id, o.final) for o in outcomes[:7]] == [
        (f"d{n}", "dropped") for n in range(3, 10)
    ]
    assert {o.error for o in outcomes[:7]} == {"queue full (3 deliveries wait)"}
    stopped = outcomes[7:10]
    assert [(o.delivery.id, o.attempt, o.error) for o in stopped] == [
        ("d0", 1, "the daemon stopped"),
        ("d1", 0, "the daemon stopped"),
        ("d2", 0, "the daemon stopped"),
    ]
    assert outcomes[10].delivery.id == "late"
    assert outcomes[10].error == "the daemon is stopping"
    assert all(o.kind == "notify_failed" and o.data()["dropped"] for o in outcomes)


@pytest.mark.parametrize("page", ["configuration.md", "operator-guide.md"])
def test_the_documented_tables_load(page: str) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / page).read_text(encoding="utf-8")
    blocks = [
        b.split("```")[0] for b in text.split("```toml\n")[1:] if "[[notify]]" in b.split("```")[0]
    ]
    assert blocks
    for block in blocks:
        parsed = config.parse(tomllib.loads(block), environ={"SLOOP_NOTIFY_SECRET": "x"})
        assert parsed.notify


def test_a_ticket_cannot_name_a_notify_target() -> None:
    # Targets come from sloop.toml only (docs/security.md "Webhooks"): a ticket's front
    # matter that tries to add one is refused, like any unknown key.
    text = '+++\n[[notify]]\nurl = "http://169.254.169.254/"\non = ["merged"]\n+++\n# Hi\n'
    with pytest.raises(api.ProtocolError, match="unknown front matter key 'notify'"):
        tickets.parse(text, "tickets/hi.md", "tickets", {"default"})


def test_the_init_templates_commented_table_loads_when_switched_on() -> None:
    # The template's commented budget needs the Codex preset's model to be priced.
    environ = {"CODEX_MODEL": "gpt-5.5"}
    parsed = config.parse(tomllib.loads(uncommented(init_template.SLOOP_TOML)), environ=environ)
    (table,) = parsed.notify
    assert table.format == "slack"
    assert table.on == {"merged", "failed", "needs_review"}
    assert config.parse(tomllib.loads(init_template.SLOOP_TOML)).notify == ()
