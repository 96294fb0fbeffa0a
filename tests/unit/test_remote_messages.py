"""Issue 35: the remote protocol's schema (``sloopd.remote.messages``, ``codec``) without
Ray: every message survives its pipe unchanged, and a message this Sloop did not write
(an unknown kind or key, a key missing, a value of another type) is refused whole."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sloopd.proc.stage_io import Limits
from sloopd.remote import codec, messages

NODE = messages.Node(id="5f1c0a9e" * 7, host="w1")
LAUNCH = messages.RemoteLaunch(
    owner="R7/implement/1",
    commit="a" * 40,
    base="b" * 40,
    branch="sloop/R7",
    argv=("claude", "-p", "ünïcode"),
    limits=Limits(timeout_ms=60_000, max_log_lines=10_000, max_log_bytes=1 << 20),
    variables={"SLOOP_RUN": "R7"},
    passed=("ANTHROPIC_API_KEY",),
    values={"ANTHROPIC_API_KEY": "k", "PATH": "/usr/bin"},
    ro_mounts=("/opt/tools",),
    rw_mounts=(),
    token="t0k",
    token_file=True,
    token_env=False,
    prompt=b"\x00\xffthe prompt\n",
    home_files={".gitconfig": "[user]\n\tname = Sloop\n"},
    network=False,
    max_bundle=512 << 20,
    auto_commit="sloop: leftovers",
    identity=("Sloop", "sloop@localhost"),
    repository="0123abcd",
)
ITEMS: tuple[messages.Item, ...] = (
    messages.Lines("stdout", ("one", "two"), True),
    messages.Conn(3, b"\x00{}\n"),
    messages.Conn(3, None),
    messages.Latency(0.25),
)
ENDS: tuple[messages.Ended, ...] = (
    messages.Ran(0, "c" * 40, ("a.txt",), "/state/ship/1.bundle", NODE),
    messages.Ran(-9, "c" * 40, (), "", None),
    messages.Lost("the node lost the child: boom", NODE),
    messages.Lost("the Ray driver exited with code 1", None),
    messages.Refused("no Ray node took the stage"),
    messages.Unreturned("fsck failed", NODE),
)

# One of each message (and each case of a union): every kind the schema knows.
EVERY: tuple[Any, ...] = (
    NODE,
    LAUNCH.limits,
    messages.Resources(cpus=1.5, memory=2 << 30, custom={"agents": 1.0}),
    messages.Resources(cpus=0.0, memory=None, custom={}),
    LAUNCH,
    messages.RemoteLaunch(**{**{f: getattr(LAUNCH, f) for f in LAUNCH.__dataclass_fields__},
                             "token": None, "prompt": None, "auto_commit": None}),
    *ITEMS,
    *ENDS,
    messages.Start("123-1", LAUNCH, messages.Resources(1.0, None, {})),
    messages.Ship("123-1", "/state/ship/x.bundle"),
    messages.Ship("123-1", ""),
    messages.Stop("123-1"),
    messages.Deliver("123-1", 0, b"answer"),
    messages.Deliver("123-1", 0, None),
    messages.Up(3),
    messages.Down("the cluster did not answer within 10 s"),
    messages.Placed("123-1", NODE, ("d" * 40,)),
    messages.Started("123-1", 4242),
    messages.Items("123-1", ITEMS, 1.5),
    messages.Items("123-1", (), 0.0),
    *(messages.Finished("123-1", end) for end in ENDS),
    messages.Ready("0.9.0", NODE),
    messages.Released(True, ""),
    messages.Released(False, "a process of the stage's child is still alive"),
    messages.Prepared("0.9.0", NODE, ()),
    messages.Began(4242),
    messages.Exited(0),
    messages.Failed("the node lost the child: x"),
    messages.Polled(ITEMS, 0.0, None),
    messages.Polled((), 3.0, messages.Exited(1)),
    messages.Polled((), 3.0, messages.Failed("the node lost the child: x")),
    LAUNCH.collect,
    messages.Collected("c" * 40, ("a.txt",), 1234),
    messages.Uncollected("the node could not bring the work back"),
)  # fmt: skip


def test_every_kind_of_message_is_tried() -> None:
    assert {codec.kind_of(type(message)) for message in EVERY} == set(codec._BY_KIND)


@pytest.mark.parametrize("message", EVERY, ids=lambda m: codec.kind_of(type(m)))
def test_every_message_reads_back_as_it_was_written(message: Any) -> None:
    raw = messages.encode(message)
    assert b"\n" not in raw  # one line of the driver's pipes
    assert messages.decode(raw, type(message)) == message
    assert orjson.loads(raw)["kind"] == codec.kind_of(type(message))


@pytest.mark.parametrize("message", [m for m in EVERY if isinstance(m, messages.Op)])
def test_ops_read_as_ops_and_never_as_events(message: messages.Op) -> None:
    raw = messages.encode(message)
    assert messages.decode_op(raw) == message
    with pytest.raises(messages.ProtocolError, match="not one of"):
        messages.decode_event(raw)


@pytest.mark.parametrize("message", [m for m in EVERY if isinstance(m, messages.Event)])
def test_events_read_as_events_and_never_as_ops(message: messages.Event) -> None:
    raw = messages.encode(message)
    assert messages.decode_event(raw) == message
    with pytest.raises(messages.ProtocolError, match="not one of"):
        messages.decode_op(raw)


def _altered(message: Any, change: Any) -> bytes:
    data = orjson.loads(messages.encode(message))
    change(data)
    return orjson.dumps(data)


def test_an_unknown_key_is_refused_at_any_depth() -> None:
    placed = messages.Placed("123-1", NODE, ())
    with pytest.raises(messages.ProtocolError, match=r"unknown keys \['colour'\]") as caught:
        messages.decode_event(_altered(placed, lambda d: d.update(colour=1)))
    # The reader learns which child an unreadable report was about.
    assert (caught.value.kind, caught.value.ident) == ("placed", "123-1")
    with pytest.raises(messages.ProtocolError, match=r"unknown keys \['zone'\]"):
        messages.decode_event(_altered(placed, lambda d: d["node"].update(zone="eu")))


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(messages.ProtocolError, match="unknown kind 'resize'"):
        messages.decode_op(b'{"kind": "resize", "id": "1"}')
    finished = messages.Finished("1", messages.Lost("x", None))
    with pytest.raises(messages.ProtocolError, match="unknown kind 'vanished'"):
        messages.decode_event(_altered(finished, lambda d: d["ended"].update(kind="vanished")))
    with pytest.raises(messages.ProtocolError, match="unknown kind None"):
        messages.decode_event(b'{"nodes": 3}')


def test_a_missing_key_is_refused_never_defaulted() -> None:
    # RemoteLaunch has defaults in Python; on the wire every key is written and read.
    start = messages.Start("1", LAUNCH, messages.Resources(1.0, None, {}))
    with pytest.raises(messages.ProtocolError, match=r"lacks the keys \['auto_commit'\]"):
        messages.decode_op(_altered(start, lambda d: d["launch"].pop("auto_commit")))


@pytest.mark.parametrize(
    ("message", "change", "expected"),
    [
        (messages.Up(3), lambda d: d.update(nodes="3"), "up.nodes is str, not int"),
        (messages.Up(3), lambda d: d.update(nodes=True), "up.nodes is bool, not int"),
        (messages.Started("1", 7), lambda d: d.update(id=1), "started.id is int, not str"),
        (messages.Items("1", (), 0.0), lambda d: d.update(silent=None), "not float"),
        (messages.Items("1", (), 0.0), lambda d: d.update(items={}), "not an array"),
        (messages.Deliver("1", 0, b"x"), lambda d: d.update(data="%%"), "not base64"),
        (messages.Ship("1", ""), lambda d: d.update(bundle=None), "not str"),
        (messages.Finished("1", messages.Refused("r")), lambda d: d.update(ended="refused"),
         "not a message"),
        (messages.Finished("1", messages.Ran(0, "c", (), "", NODE)),
         lambda d: d["ended"].update(node="w1"), "not a message"),
        (messages.Start("1", LAUNCH, messages.Resources(1.0, None, {})),
         lambda d: d["launch"].update(identity=["Sloop"]), "has 1 items, not 2"),
        (messages.Start("1", LAUNCH, messages.Resources(1.0, None, {})),
         lambda d: d["launch"]["limits"].update(timeout_ms=1.5), "limits.timeout_ms is float"),
        (messages.Start("1", LAUNCH, messages.Resources(1.0, None, {})),
         lambda d: d["resources"]["custom"].update(agents="1"), r"custom\['agents'\] is str"),
    ],
)  # fmt: skip
def test_a_value_of_the_wrong_type_is_refused(message: Any, change: Any, expected: str) -> None:
    with pytest.raises(messages.ProtocolError, match=expected):
        codec.decode_any(_altered(message, change), messages.Op | messages.Event)


def test_a_message_of_another_kind_where_one_is_expected_is_refused() -> None:
    with pytest.raises(messages.ProtocolError, match="not one of: polled"):
        messages.decode(messages.encode(messages.Began(1)), messages.Polled)
    # A Polled's end is Exited, Failed or null: never an Ended of the daemon's.
    polled = messages.Polled((), 0.0, messages.Exited(0))
    with pytest.raises(messages.ProtocolError, match="not one of: exited, failed"):
        messages.decode(
            _altered(polled, lambda d: d.update(end={"kind": "refused", "reason": "x"})),
            messages.Polled,
        )


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b'"up"', b"\xff"])
def test_what_is_not_a_message_is_refused(raw: bytes) -> None:
    with pytest.raises(messages.ProtocolError):
        messages.decode_event(raw)


def test_resources_of_a_placement_request() -> None:
    asked = {"cpus": 8, "memory": 2 << 30, "custom": {"agents": 1, "big": 1}}
    expected = messages.Resources(8.0, 2 << 30, {"agents": 1.0, "big": 1.0})
    assert messages.Resources.of(asked) == expected
    assert messages.Resources.of({}) == messages.Resources(1.0, None, {})
