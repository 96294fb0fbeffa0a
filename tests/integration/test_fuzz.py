"""Hostile requests on a real operator socket (issue 13, "Hardening").

Hypothesis writes envelopes of every verb with hostile values (huge integers,
``1e400``, lone surrogates, invalid UTF-8, NULs, long strings, regex bombs,
deep nesting, wrong types) and raw lines (truncated, BOM-prefixed, trailing
garbage, random bytes, over-long).  For every line the test works out on its
own what the reply's ``id`` must be, and asserts:

- no reply is ``internal``; every line but a blank one is answered exactly
  once, in order, with a well-formed envelope;
- every readable id is echoed (docs/protocol.md, "The response id");
- nothing stored changes: every table is read before and after through a
  read-only connection.  Mutating verbs are sent only in forms the daemon
  must refuse, and the tickets are posted ``manual`` or ``hold``, so nothing
  is scheduled behind the test's back;
- a second connection's ``show`` is answered within a second throughout.

The seed is printed; ``SLOOP_FUZZ_SEED=<seed>`` replays a run.  The long
variant (``make test-long``) sends at least 10,000 requests under each of three seeds.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from sloopd.queue import refs
from sloopd.store import db
from sloopd.wire import api
from tests.support.daemon import Client, short_tmpdir
from tests.support.scaling import main_thread_cpu_seconds
from tests.support.tickets import Operator, later, queue_repo, ticket_text

BOM = b"\xef\xbb\xbf"
LIMIT = api.MAX_REQUEST_BYTES
BATCH = 10  # lines per Hypothesis example, pipelined in one write
PROBE_EVERY_S = 0.1
PROBE_LIMIT_S = 1.0
MUTATING = frozenset({"post", "run", "hold", "ready", "pause", "resume", "gc"})
LONG_NAME = "a" * 99  # ticket names are at most 100 characters
TICKETS: dict[str, dict[str, Any]] = {  # name -> post arguments; none schedules a run
    "login": {"manual": True},
    "fix.login": {"hold": True},
    "invoice": {"trigger": later()},
    LONG_NAME: {"manual": True},
    LONG_NAME + "b": {"manual": True},
    "STRASSE-strasse": {"manual": True},
}
KNOWN_REFS: set[str] = set()  # the posted tickets' ids and names, casefolded
KNOWN_PATHS: set[str] = set()
REGEX_BOMBS = [
    "(a+)+$",
    "(a|aa)+$",
    "(a*)*b",
    "^(a+)+$",
    "a{4294967296}",
    "a{1001}",
    "a{1,99999999999}",
    "(" * 400 + ")" * 400,
    "(" * 5000 + ")" * 5000,
    "(?au)x",
    "(?L)x",
    "(?<=a)b",
    "(?=a)",
    "(a)\\1",
    "(?P<n>a)(?P=n)",
    "[",
    "x**",
    "\\",
    ".*" * 500,
    "[^a]{1000}",
    "(.*.*.*.*.*){1,1000}x",
    "\\p{Greek}+",
    "(?i)STRASSE|ß",
    "\\Q{99999}\\E",
    "a\x00b|.",
    "\\x{110000}",
]


# --- values the serializer writes as given ------------------------------------------


@dataclass(frozen=True)
class Raw:
    """JSON text written as is: numbers no encoder emits, strings of invalid UTF-8."""

    text: bytes


@dataclass(frozen=True)
class Deep:
    depth: int
    objects: bool


def dump(value: Any) -> bytes:
    """JSON for any generated value; lone surrogates become escapes or raw (CESU) bytes."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Deep):
        if value.objects:
            return b'{"a":' * value.depth + b"1" + b"}" * value.depth
        return b"[" * value.depth + b"]" * value.depth
    if isinstance(value, str):
        ascii_only = len(value) % 2 == 0
        return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return json.dumps(value).encode()
    if isinstance(value, float):
        return repr(value).encode() if value == value and abs(value) != float("inf") else b"1e400"
    if isinstance(value, list):
        return b"[" + b",".join(dump(v) for v in value) + b"]"
    if isinstance(value, Members):
        return b"{" + b",".join(dump(k) + b":" + dump(v) for k, v in value.items) + b"}"
    assert isinstance(value, dict), value
    return dump(Members(list(value.items())))


@dataclass(frozen=True)
class Members:
    """An object in the order written (an envelope may put ``id`` anywhere)."""

    items: list[tuple[Any, Any]]


def usable(value: Any) -> api.RequestId:
    """The protocol's id rule, restated: a valid-Unicode string or a 64-bit integer."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return None
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value if -(2**63) <= value <= 2**64 - 1 else None
    return None


def expected_id(value: Any) -> api.RequestId:
    """What a reader of the written id sees: escapes decoded, invalid UTF-8 unreadable."""
    if isinstance(value, str):
        try:
            text = dump(value).decode()
        except UnicodeDecodeError:
            return None
        return usable(json.loads(text))
    return usable(value)


def oracle(line: bytes) -> api.RequestId:
    """The expected id of a line nothing else is known about (random bytes)."""
    if len(line) > LIMIT:
        return None
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError:
        body = line[len(BOM) :] if line.startswith(BOM) else line
        try:
            message = json.loads(body.decode("utf-8", "surrogateescape"), parse_constant=_refuse)
        except (ValueError, RecursionError):
            return None
    return usable(message.get("id")) if isinstance(message, dict) else None


def _refuse(name: str) -> None:
    raise ValueError(name)


# --- strategies ---------------------------------------------------------------------

_surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
texts = st.one_of(
    st.text(max_size=30),
    st.text(st.one_of(st.characters(), _surrogates), max_size=12),
    st.sampled_from(["T1", "R1", "T99999999999999999999", "login", "LOGIN", "login#1", "project:"]),
    st.sampled_from(["tickets/login.md", "./tickets/../tickets/login.md", "project:default"]),
    st.sampled_from(REGEX_BOMBS),
    st.builds(lambda c, n: c * n, st.sampled_from("a(é\x00/.*"), st.integers(250, 5000)),
    st.builds(lambda s: s + "\x00", st.text(max_size=5)),
)
numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, -1, 2**53, 2**53 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1]),
    st.integers(10**300, 10**400),
    st.floats(),
    st.sampled_from([Raw(b"1e400"), Raw(b"-1e400"), Raw(b"1e-400"), Raw(b"9" * 5000)]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts, st.just(Raw(b'"\xff\xfe"')))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=8,
)
hostile = st.one_of(values, st.sampled_from(REGEX_BOMBS))
# At most one per line: a line nested past 1024 levels is read for its id up
# to salvage.MAX_DEEP_TOKENS tokens, and one of these stays well inside that.
deep = st.builds(Deep, st.integers(900, 3000), st.booleans())
ids = st.one_of(st.text(max_size=12), texts, numbers, values)
references = st.one_of(texts, texts, st.sampled_from(REGEX_BOMBS), values)
paths = st.one_of(
    texts,
    st.builds(
        lambda folder, name, suffix: folder + name + suffix,
        st.sampled_from(["", "tickets/", "absent/", "/", "/nowhere/", "tickets/" * 700]),
        texts,
        st.sampled_from([".md", ".md", ".markdown", ""]),
    ),
    values,
)
counts = st.one_of(numbers, numbers, values)
# Each argument's values: mostly of its own type, hostile in content, then anything.
ARGUMENT_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "ref": references,
    "run": references,
    "scope": references,
    "stage": references,
    "path": paths,
    "limit": counts,
    "tail": counts,
    "timeout_ms": st.one_of(st.integers(-5, 0), numbers, values),  # never a long wait
    "trigger": st.one_of(st.fixed_dictionaries({"at_ms": counts}), values),
    "after": st.one_of(texts, st.integers(0, 10**20).map(str), values),
}


def _strict(value: Any) -> bool:
    """Could orjson read this value?  (Then the request reaches its verb.)"""
    try:
        orjson.loads(dump(value))
    except orjson.JSONDecodeError:
        return False
    return True


@st.composite
def envelopes(draw: st.DrawFn) -> tuple[bytes, api.RequestId]:
    """An envelope of a random verb with hostile arguments; its line and expected id.

    Three in four arguments are values orjson reads, so most requests reach
    their verb's checks and handler; the rest break strict JSON somewhere.
    """
    # The verbs that read refs, patterns and paths, twice as often as the rest.
    verb = draw(
        st.sampled_from([*sorted(api.VERBS), *["show", "events", "list", "post", "logs"] * 4])
        if draw(st.integers(0, 9))
        else texts
    )
    known = api.VERBS.get(verb) if isinstance(verb, str) else None
    names = sorted(known.fields) if known else []
    args: list[tuple[Any, Any]] = []
    chosen = st.lists(st.sampled_from(names), unique=True, min_size=draw(st.integers(0, 1)))
    for name in draw(chosen) if names else []:
        choice = ARGUMENT_VALUES.get(name, hostile)
        if draw(st.integers(0, 3)):
            choice = choice.filter(_strict)
        args.append((name, draw(choice)))
    if draw(st.integers(0, 9)) == 0:
        args.append((draw(texts), draw(hostile)))
    if args and draw(st.integers(0, 9)) == 0:
        index = draw(st.integers(0, len(args) - 1))
        args[index] = (args[index][0], draw(deep))
    fields: list[tuple[Any, Any]] = [
        ("v", draw(st.sampled_from([1] * 40 + [2, 0, "1", None, 1.0, Raw(b"1e400")]))),
        ("verb", verb),
        ("args", Members(args) if draw(st.integers(0, 19)) else draw(values)),
    ]
    if draw(st.integers(0, 4)) == 0:
        fields.append(("token", draw(st.one_of(st.none(), st.none(), texts, values))))
    if draw(st.integers(0, 9)) == 0:
        fields.append(("trace", draw(values)))  # an unknown envelope field: ignored
    has_id = draw(st.integers(0, 19)) != 0
    request_id = draw(st.text(max_size=12) if draw(st.integers(0, 7)) else ids) if has_id else None
    if has_id:
        fields.insert(draw(st.integers(0, len(fields))), ("id", request_id))
    line = dump(Members(fields))
    return line, (expected_id(request_id) if has_id and len(line) <= LIMIT else None)


@st.composite
def raw_lines(draw: st.DrawFn) -> tuple[bytes, api.RequestId]:
    line, expected = draw(envelopes())
    how = draw(st.sampled_from(["bom", "truncated", "garbage", "random", "not an object"]))

    if how == "bom":
        return BOM + line, expected if len(line) + 3 <= LIMIT else None
    if how == "truncated":
        return line[: draw(st.integers(1, len(line) - 1))], None
    if how == "garbage":
        return line + draw(st.sampled_from([b"x", b"}", b",", b"{}", b" 1"])), None
    if how == "not an object":
        return b"[" + line + b"]", None
    data = draw(st.binary(min_size=1, max_size=200)).replace(b"\n", b" ")
    return data, oracle(data)


LINES = st.one_of(envelopes(), envelopes(), envelopes(), raw_lines())


# --- the daemon and its store ---------------------------------------------------------


@pytest.fixture(scope="module")
def target() -> Iterator[Operator]:
    root = short_tmpdir("fz")
    op = Operator(root, queue_repo(root))
    try:
        for name, args in TICKETS.items():
            folder = "tickets/auth" if name == "fix.login" else "tickets"
            op.write(f"{folder}/{name}.md", ticket_text(f"Title of {name}", "body"))
            ticket = op.post(f"{folder}/{name}.md", **args)["ticket"]
            KNOWN_REFS.update({ticket["id"].casefold(), name.casefold()})
            KNOWN_PATHS.add(ticket["path"])
        yield op
    finally:
        op.stop()
        shutil.rmtree(root, ignore_errors=True)


def snapshot(state_dir: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, through a read-only connection beside the daemon's."""
    conn = apsw.Connection(str(state_dir / db.STORE_FILE), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            t: [tuple(r) for r in conn.execute(f'SELECT * FROM "{t}" ORDER BY 1')] for t in tables
        }
    finally:
        conn.close()


def may_change_state(op: Operator, line: bytes) -> bool:
    """Would the daemon act on this request?  Then it is not sent."""
    try:
        message = orjson.loads(line)
        request = api.parse_envelope(message)
        if request.verb.name not in MUTATING or request.token is not None:
            return False
        args = request.verb.parse(request.args)
    except (orjson.JSONDecodeError, api.ProtocolError):
        return False
    if request.verb.name in {"pause", "resume", "gc"}:
        return True
    if request.verb.name == "post":
        try:
            return os.path.exists(os.path.realpath(op.repo / args["path"]))
        except (ValueError, OSError):
            return False
    ref: str = args["ref"]  # run, hold, ready: acting on a ticket only if it resolves
    return ref.casefold() in KNOWN_REFS or refs.repo_relative(op.repo, ref) in KNOWN_PATHS


# --- the run --------------------------------------------------------------------------


@dataclass
class Figures:
    requests: int = 0
    internal: int = 0
    unechoed: int = 0
    unanswered: int = 0
    slow_probes: int = 0
    worst_probe_s: float = 0.0  # wall time, printed
    worst_probe_work_s: float = 0.0  # the daemon's CPU time across it, judged
    failures: list[str] = field(default_factory=list)

    def fail(self, what: str, line: bytes, reply: Any) -> None:
        if len(self.failures) < 20:
            self.failures.append(f"{what}: line {line[:160]!r} -> {str(reply)[:300]}")


class Probe(threading.Thread):
    """A second client asking ``show`` every 100 ms; it remembers the slowest answer.

    An answer is slow when the daemon did more than PROBE_LIMIT_S of work (its CPU
    time) while the probe waited: no request may hold the loop that long.  Wall time
    is only printed: a busy host stretches it without any request being at fault.
    """

    def __init__(self, socket: Path, daemon_pid: int, figures: Figures) -> None:
        super().__init__(daemon=True)
        # Patient: a busy host may stretch an answer; the work behind it is what counts.
        self.client = Client(socket, timeout=60)
        self.daemon_pid = daemon_pid
        self.figures = figures
        self.done = threading.Event()

    def run(self) -> None:
        figures = self.figures
        try:
            while not self.done.wait(PROBE_EVERY_S):
                started, working = time.perf_counter(), main_thread_cpu_seconds(self.daemon_pid)
                self.client.ok("show", {})
                took = time.perf_counter() - started
                work = main_thread_cpu_seconds(self.daemon_pid) - working
                figures.worst_probe_s = max(figures.worst_probe_s, took)
                figures.worst_probe_work_s = max(figures.worst_probe_work_s, work)
                figures.slow_probes += work > PROBE_LIMIT_S
        finally:
            self.client.close()


def send_batch(client: Client, batch: list[tuple[bytes, api.RequestId]], figures: Figures) -> None:
    client.send_raw(b"".join(line + b"\n" for line, _ in batch))
    for line, expected in batch:
        figures.requests += 1
        raw = client.read_raw()
        if not raw:
            figures.unanswered += 1
            figures.fail("unanswered", line, "connection closed")
            raise AssertionError(figures.failures)
        reply = orjson.loads(raw)
        assert set(reply) in ({"id", "ok", "data"}, {"id", "ok", "error"}), reply
        if not reply["ok"] and reply["error"]["code"] == "internal":
            figures.internal += 1
            figures.fail("internal", line, reply)
        if reply["id"] != expected or type(reply["id"]) is not type(expected):
            figures.unechoed += 1
            figures.fail(f"id {reply['id']!r}, expected {expected!r}", line, reply)
        if len(line) > LIMIT:
            assert reply["error"]["details"] == {"limit_bytes": LIMIT}, reply


def fuzz(op: Operator, seed: int, requests: int, overlong: int = 2) -> Figures:
    print(f"fuzz seed {seed} (replay: SLOOP_FUZZ_SEED={seed})")
    assert op.process.socket is not None
    figures = Figures()
    before = snapshot(op.state_dir)
    client = Client(op.process.socket, timeout=30)
    assert op.process.proc is not None
    probe = Probe(op.process.socket, op.process.proc.pid, figures)
    probe.start()

    @hypothesis_seed(seed)
    @settings(
        max_examples=requests // BATCH,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(LINES, min_size=BATCH, max_size=BATCH))
    def one_batch(batch: list[tuple[bytes, api.RequestId]]) -> None:
        sent = [(line, expected) for line, expected in batch if line.strip()]
        send_batch(client, [p for p in sent if not may_change_state(op, p[0])], figures)

    try:
        one_batch()
        rng = random.Random(seed)
        for _ in range(overlong):
            filler = b"a" * (LIMIT + rng.randint(1, 4096))
            line = b'{"v":1,"id":"long","verb":"show","args":{"ref":"' + filler + b'"}}'
            send_batch(
                client,
                [(line, None), (b'{"v":1,"id":"after","verb":"show","args":{}}', "after")],
                figures,
            )
    finally:
        probe.done.set()
        probe.join(timeout=10)
        client.close()
    assert op.process.alive(), op.process.log()
    changed = {t for t, rows in snapshot(op.state_dir).items() if rows != before.get(t)}
    print(
        f"fuzz seed {seed}: {figures.requests} requests, {figures.internal} internal, "
        f"{figures.unechoed} unechoed ids, {figures.unanswered} unanswered, "
        f"{len(changed)} tables changed, slowest show {figures.worst_probe_s:.3f}s "
        f"(behind {figures.worst_probe_work_s:.3f}s of the daemon's work at most)"
    )
    context = f"seed {seed}: {figures.failures}"
    assert figures.internal == 0, context
    assert figures.unechoed == 0, context
    assert changed == set(), f"seed {seed}: tables changed: {sorted(changed)}"
    work = figures.worst_probe_work_s
    assert figures.slow_probes == 0, f"seed {seed}: a show waited behind {work:.2f}s of work"
    # Only a sanity bound on wall time, for a loop held by a blocking wait (no work):
    # a busy host stretches answers, but not tenfold past the limit.
    assert figures.worst_probe_s < 10 * PROBE_LIMIT_S, f"seed {seed}: {figures.worst_probe_s}"
    return figures


def seed_from_environment() -> int:
    given_seed = os.environ.get("SLOOP_FUZZ_SEED")
    return int(given_seed) if given_seed else random.SystemRandom().randrange(2**32)


def test_hostile_requests_are_answered_with_their_ids_and_change_nothing(
    target: Operator,
) -> None:
    figures = fuzz(target, seed_from_environment(), requests=2500)
    assert figures.requests >= 2000


@pytest.mark.long
@pytest.mark.parametrize("index", range(3))
def test_long_fuzz(target: Operator, index: int) -> None:
    given_seed = os.environ.get("SLOOP_FUZZ_SEED")
    chosen = int(given_seed) + index if given_seed else random.SystemRandom().randrange(2**32)
    # About 2% of generated lines could change state and are not sent: generate more,
    # so at least 10,000 hostile requests reach the daemon under each seed.
    figures = fuzz(target, chosen, requests=10_500, overlong=5)
    assert figures.requests >= 10_000
