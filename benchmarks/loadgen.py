"""The one load generator for every server compared: Python, uvloop, closed loop.

Each connection sends one request, reads the whole reply, and only then sends the next
(no pipelining).  Two ways to know a reply is whole, the same for every server:

- by reference (``Load.reference``): the reply to this very request was fetched, decoded
  in full (``orjson.loads``, ``decode_resp``) and checked before the clock started; each
  timed reply is compared with it byte for byte as it arrives and is whole when all of it
  is in.  The client's cost per reply is a memcmp, whatever the protocol.
- by framing: for NDJSON the line's newline; for RESP, ``RespReader`` walks every element
  of the reply (array counts, bulk lengths, in Python) until the outermost array is
  complete.  For a Redis XRANGE of 100 entries that walk is ~500 elements and costs the
  client several times what Redis spends answering, so a framing-mode Redis figure
  measures the client; it is reported beside the reference-mode one, not instead of it.

Connections are spread over worker processes (``multiprocessing``, spawn), each running
its own uvloop: on a 2-core machine two processes let the client side use the core the
server leaves idle, so one Python client loop is not what limits the server.  Every
process measures its own CPU time inside the window, the server's is read from
/proc/<pid>/stat and the machine's from /proc/stat, so a table can say which side was
saturated and how much of the machine other processes took.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, cast

import uvloop

from benchmarks.common import cpu_seconds, machine_cpu_seconds

Framing = Literal["line", "resp"]


# --- RESP ---------------------------------------------------------------------------


class RespError(Exception):
    pass


class RespReader:
    """Consumes bytes until one complete RESP reply is in; ``feed`` says when it is.

    Incremental: the position and the count of elements still expected survive between
    chunks, so every byte of a reply is looked at once, whatever the chunking.  Header
    numbers are converted once and remembered (``int(bytes)`` is the slowest step).
    """

    __slots__ = ("_buf", "_pending", "_pos", "error")
    _numbers: ClassVar[dict[bytes, int]] = {}

    def __init__(self) -> None:
        self._buf = b""
        self._pos = 0
        self._pending = 1
        self.error = False

    def feed(self, data: bytes) -> bool:
        buf = self._buf + data if self._buf else data
        pos, pending, size = self._pos, self._pending, len(buf)
        find, numbers = buf.find, self._numbers
        while pending:
            end = find(b"\r\n", pos)
            if end < 0:
                break
            kind = buf[pos]
            if kind == 36 or kind == 42:  # $ bulk string or * array
                token = buf[pos + 1 : end]
                number = numbers.get(token)
                if number is None:
                    number = numbers[token] = int(token)
                if kind == 36:  # header, payload, CRLF (or a null bulk: header only)
                    after = end + 4 + number if number >= 0 else end + 2
                    if after > size:
                        break
                    pos = after
                    pending -= 1
                else:  # the array's elements replace it (a null array is one value)
                    pending += number - 1 if number > 0 else -1
                    pos = end + 2
            elif kind == 43 or kind == 58:  # + simple string, : integer
                pos = end + 2
                pending -= 1
            elif kind == 45:  # - error
                self.error = True
                pos = end + 2
                pending -= 1
            else:
                raise RespError(f"not RESP at byte {pos}: {buf[pos : pos + 20]!r}")
        if pending:
            self._buf, self._pos, self._pending = buf, pos, pending
            return False
        if pos != size:
            raise RespError(f"{size - pos} bytes after a complete reply (pipelining?)")
        self._buf, self._pos, self._pending = b"", 0, 1
        return True


def resp_command(*parts: bytes | str | int) -> bytes:
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        raw = part if isinstance(part, bytes) else str(part).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


def decode_resp(data: bytes, pos: int = 0) -> tuple[Any, int]:
    """A whole RESP value into Python objects (for checks, never while timed)."""
    end = data.index(b"\r\n", pos)
    kind, head = data[pos : pos + 1], data[pos + 1 : end]
    if kind == b"$":
        length = int(head)
        if length < 0:
            return None, end + 2
        return data[end + 2 : end + 2 + length], end + 4 + length
    if kind == b"*":
        items: list[Any] = []
        cursor = end + 2
        for _ in range(max(0, int(head))):
            item, cursor = decode_resp(data, cursor)
            items.append(item)
        return items, cursor
    if kind == b":":
        return int(head), end + 2
    if kind == b"+":
        return head.decode(), end + 2
    if kind == b"-":
        raise RespError(head.decode())
    raise RespError(f"not RESP: {data[pos : pos + 20]!r}")


# --- the closed-loop client ------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    path: str  # the server's Unix socket
    request: bytes
    framing: Framing
    connections: int  # per process
    warmup: float
    duration: float
    # When set, each reply is compared byte for byte with this one (decoded and checked
    # before timing) as it arrives, and is whole when it is all there; the framing
    # reader runs only if a reply differs (counted as an error).
    reference: bytes | None = None
    interval: float | None = None  # at most one request per interval per connection
    latencies: bool = False
    # Without a reference, a reply whose size differs from the first one counts as an
    # error; replies that legitimately vary (show: clocks, uptimes) turn that off.
    fixed_size: bool = True


@dataclass
class Stats:
    completed: int = 0
    errors: int = 0
    recording: bool = False
    stopping: bool = False
    latencies: list[float] = field(default_factory=list)


class Conn(asyncio.Protocol):
    def __init__(self, load: Load, stats: Stats) -> None:
        self.load = load
        self.stats = stats
        self.transport: asyncio.Transport | None = None
        self.sent = 0.0
        self.busy = False
        self.reader = RespReader() if load.framing == "resp" else None
        self.reference = load.reference
        self.matching = True
        self.chunks: list[bytes] = []
        self.size = 0
        self.expected_size = len(load.reference) if load.reference else 0
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def send(self) -> None:
        if self.stats.stopping or self.transport is None:
            return
        self.busy = True
        self.sent = time.perf_counter()
        self.transport.write(self.load.request)

    def data_received(self, data: bytes) -> None:
        offset = self.size
        self.size = offset + len(data)
        reference = self.reference
        if reference is not None and self.matching:
            if reference.startswith(data, offset):
                self.chunks.append(data)
                if self.size == len(reference):
                    self.done()
                return
            self.stats.errors += 1
            self.matching = False
            data = b"".join(self.chunks) + data
        if self.frame(data):
            self.done()

    def frame(self, data: bytes) -> bool:
        """Whether the reply is whole, by its framing."""
        if self.reader is None:
            return data.endswith(b"\n")
        try:
            return self.reader.feed(data)
        except RespError:
            self.stats.errors += 1
            self.reader = RespReader()
            return True

    def done(self) -> None:
        now = time.perf_counter()
        stats = self.stats
        self.busy = False
        if self.expected_size == 0:
            self.expected_size = self.size
        elif (self.load.fixed_size and self.size != self.expected_size) or (
            self.reader is not None and self.reader.error
        ):
            stats.errors += 1
        self.size = 0
        self.matching = True
        self.chunks = []
        stats.completed += 1
        if stats.recording:
            stats.latencies.append(now - self.sent)
        if stats.stopping:
            return
        interval = self.load.interval
        if interval is not None and self.sent + interval > now:
            self.loop.call_later(self.sent + interval - now, self.send)
        else:
            self.send()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.stats.stopping:
            self.stats.errors += 1
        self.transport = None


@dataclass
class WorkerResult:
    completed: int
    errors: int
    cpu: float
    latencies: list[float]


async def _worker(load: Load, ready: Any, go: Any, start_at: Any) -> WorkerResult:
    loop = asyncio.get_running_loop()
    stats = Stats()
    conns: list[Conn] = []
    for _ in range(load.connections):
        _, conn = await loop.create_unix_connection(lambda: Conn(load, stats), load.path)
        conns.append(conn)
    ready.put(True)
    if not go.wait(60):
        raise RuntimeError("the load generator was never started")
    begin = float(start_at.value)
    await asyncio.sleep(max(0.0, begin - time.monotonic()))
    for conn in conns:
        conn.send()
    window = begin + load.warmup
    await asyncio.sleep(max(0.0, window - time.monotonic()))
    completed0, errors0, cpu0 = stats.completed, stats.errors, time.process_time()
    stats.recording = load.latencies
    await asyncio.sleep(max(0.0, window + load.duration - time.monotonic()))
    completed1, errors1, cpu1 = stats.completed, stats.errors, time.process_time()
    stats.recording = False
    stats.stopping = True
    deadline = time.monotonic() + 5.0
    while any(c.busy for c in conns) and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    for conn in conns:
        if conn.transport is not None:
            conn.transport.close()
    return WorkerResult(completed1 - completed0, errors1 - errors0, cpu1 - cpu0, stats.latencies)


def _worker_main(load: Load, ready: Any, go: Any, start_at: Any, results: Any) -> None:
    try:
        results.put(uvloop.run(_worker(load, ready, go, start_at)))
    except BaseException as exc:
        ready.put(False)
        results.put(exc)
        raise


@dataclass
class Outcome:
    requests: int
    seconds: float
    errors: int
    client_cpu: float  # CPU seconds of all client processes inside the window
    server_cpu: float  # CPU seconds of the server inside the window
    machine_cpu: float  # CPU seconds of the whole machine (all processes) inside the window
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def plus(self, other: Outcome) -> Outcome:
        """Two windows of the same load as one (interleaved measurements add up)."""
        return Outcome(
            requests=self.requests + other.requests,
            seconds=self.seconds + other.seconds,
            errors=self.errors + other.errors,
            client_cpu=self.client_cpu + other.client_cpu,
            server_cpu=self.server_cpu + other.server_cpu,
            machine_cpu=self.machine_cpu + other.machine_cpu,
            latencies=self.latencies + other.latencies,
        )

    @property
    def server_busy(self) -> float:
        """The server's CPU use as a fraction of one core."""
        return self.server_cpu / self.seconds

    @property
    def client_busy(self) -> float:
        return self.client_cpu / self.seconds

    @property
    def others_busy(self) -> float:
        """CPU used by processes other than the server and the clients (cores)."""
        return max(0.0, (self.machine_cpu - self.server_cpu - self.client_cpu) / self.seconds)

    def summary(self) -> str:
        return (
            f"{self.requests} requests in {self.seconds:.1f} s, {self.errors} errors;"
            f" CPU in cores: server {self.server_busy:.2f}"
            f" ({self.server_cpu / max(1, self.requests) * 1e6:.0f} µs/request),"
            f" clients {self.client_busy:.2f}, other processes {self.others_busy:.2f}"
        )


def _wait_ready(workers: list[Any], ready: Any, path: str, timeout: float = 60.0) -> None:
    """Until every worker has connected; fails fast when one died or could not connect."""
    deadline, waiting = time.monotonic() + timeout, len(workers)
    while waiting:
        try:
            if not ready.get(timeout=0.2):
                raise RuntimeError(f"a load worker could not connect to {path}")
            waiting -= 1
        except queue.Empty:
            dead = [w.exitcode for w in workers if w.exitcode is not None]
            if dead:
                raise RuntimeError(f"a load worker exited ({dead[0]}) before connecting") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"load workers not connected after {timeout} s") from None


def drive(
    load: Load,
    processes: int,
    server_pid: int,
) -> Outcome:
    """Run ``processes`` workers of ``load.connections`` connections each; their sum."""
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    start_at = ctx.Value("d", 0.0)
    workers = [
        ctx.Process(target=_worker_main, args=(load, ready, go, start_at, results), daemon=True)
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    try:
        _wait_ready(workers, ready, load.path)
        start_at.value = time.monotonic() + 0.1
        go.set()
        window = start_at.value + load.warmup
        time.sleep(max(0.0, window - time.monotonic()))
        server0, machine0 = cpu_seconds(server_pid), machine_cpu_seconds()
        time.sleep(max(0.0, window + load.duration - time.monotonic()))
        server1, machine1 = cpu_seconds(server_pid), machine_cpu_seconds()
        gathered: list[WorkerResult] = []
        for _ in workers:
            item = results.get(timeout=load.duration + 60)
            if isinstance(item, BaseException):
                raise RuntimeError(f"a load worker failed: {item!r}")
            gathered.append(item)
    finally:
        for worker in workers:
            worker.join(10)
            if worker.is_alive() and worker.pid is not None:
                worker.kill()
                worker.join()
    return Outcome(
        requests=sum(r.completed for r in gathered),
        seconds=load.duration,
        errors=sum(r.errors for r in gathered),
        client_cpu=sum(r.cpu for r in gathered),
        server_cpu=server1 - server0,
        machine_cpu=machine1 - machine0,
        latencies=[x for r in gathered for x in r.latencies],
    )
