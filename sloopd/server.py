"""The daemon's lifecycle: ``Server(options).run()`` = startup, serve, shutdown.

``run()`` blocks (the console script); ``serve()`` is awaitable so tests can
run the real daemon in-process as well as a subprocess.

Start-up pushes the undoing of each thing it makes onto one exit stack as it makes
it, so shutdown undoes them in the reverse order by construction (the doors close
first, the runs stop before their children, the store closes last but for the lock),
and a start refused half way undoes exactly what it had made.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from sloopd import compose
from sloopd.core import cli_sight, config, diskfull, leftovers, paths
from sloopd.core.logroom import DiskRoom
from sloopd.core.logsink import LogSink
from sloopd.core.model import ReadModel
from sloopd.core.notices import Notices
from sloopd.core.state import Daemon
from sloopd.landing.hand_merges import HandMerges
from sloopd.ops.metrics import Metrics, parse_address, serve_metrics
from sloopd.ops.notify import Notifier
from sloopd.ops.process import answers, log_tasks
from sloopd.proc import peers
from sloopd.proc.children import ProcessGroups
from sloopd.proc.sandbox import probe as sandbox_probe
from sloopd.queue import gate
from sloopd.queue.scheduler import Scheduler
from sloopd.resume.recovery import recover as recover_runs
from sloopd.runs.runner import RunManager
from sloopd.runs.runstate import ActiveRun
from sloopd.startup import DiskFull, StartupError, refusal, refuse_if_served, write_info
from sloopd.store import Store, StoreLock, StoreTooNew, StoreUnavailable
from sloopd.util import tooltree
from sloopd.verbs import operator_dispatcher, operator_handlers, refused_handlers
from sloopd.wire import api
from sloopd.wire.connection import LISTEN_BACKLOG, Connection, bound_private
from sloopd.wire.dispatch import Dispatcher, OperatorDispatcher, RefusingDispatcher

ORPHAN_REAP_SECONDS = 1.0
# How long a killed daemon's git calls may take to finish before they are killed.
SURVIVOR_WAIT_SECONDS = 10.0
STATUS_SECONDS = 5.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServeOptions:
    repo: Path | None = None
    state_dir: Path | None = None
    socket_dir: Path | None = None
    metrics: str | None = None


class Server:
    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self.layout = paths.resolve(options.repo, options.state_dir, options.socket_dir)
        self.daemon: Daemon | None = None
        self.notifier = Notifier()
        self.ready = asyncio.Event()
        self._stop: asyncio.Event | None = None
        self._lock = StoreLock(self.layout.state_dir, "sloopd serve")
        # What start-up made, each with its undoing; closed by shutdown or a refusal.
        self._made = contextlib.AsyncExitStack()
        # The operator socket's server until its file is removed (once: see _unlisten).
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[Connection] = set()
        self._signals = 0
        # Whether daemon_started was recorded: daemon_stopped pairs with it.
        self._said_started = False
        self.runs: RunManager | None = None
        # The runs in flight: the RunManager's registry, the daemon's live read side.
        self._active: dict[str, ActiveRun] = {}
        self.metrics = Metrics()

    def run(self) -> int:
        import uvloop

        try:
            uvloop.run(self.serve())
        except StartupError as exc:
            log.error("%s", exc)
            return exc.exit_code
        return 0

    async def serve(self) -> None:
        self._stop = asyncio.Event()
        await self.startup()
        try:
            await self._stop.wait()
        finally:
            await self.shutdown()

    def request_stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    async def startup(self) -> None:
        try:
            await self._start()
        except BaseException:
            try:
                await self._made.aclose()
            except Exception:  # the refusal itself is what the operator must read
                log.exception("undoing the refused start failed")
            raise

    async def shutdown(self) -> None:
        await self._made.aclose()
        log.info("stopped")

    async def _start(self) -> None:
        layout, made = self.layout, self._made
        self._take_lock()
        try:
            settings = config.load(layout.repo)
        except config.ConfigError as exc:
            raise StartupError(f"refusing to start: {exc}") from exc
        store, refused = self._open_store()
        if store is not None:
            made.callback(self._close_store, store)
        self.daemon = daemon = Daemon(
            layout=layout,
            config=settings,
            store=store,
            refused=refused,
            metrics=self.metrics,
            active_runs=self._active,
        )
        self._check_clis()
        scheduler: Scheduler | None = None
        groups: ProcessGroups | None = None
        if store is not None:
            try:
                scheduler, groups = await self._reconcile(daemon, store)
            except (StoreUnavailable, OSError) as exc:
                # Recovery must record what it decides; without a writable store it
                # decides nothing and leaves everything for the next start.
                raise refusal(layout, exc) from exc
        else:
            # Even a daemon that refuses its store ends what a crashed one left.
            ProcessGroups(layout.state_dir / "groups").kill_recorded_leftovers()
        await self._listen(daemon)
        await self._serve_metrics()
        try:
            write_info(layout)
        except OSError as exc:
            raise refusal(layout, exc) from exc
        made.callback(layout.daemon_info.unlink, missing_ok=True)
        loop = asyncio.get_running_loop()
        if store is not None:
            self._said_started = True
            try:
                daemon.append_event("daemon_started", data={"pid": os.getpid()})
            except StoreUnavailable as exc:
                log.warning("daemon_started not recorded: %s", exc)
            self.metrics.watch(daemon)
        tasks: list[asyncio.Task[None]] = []
        if scheduler is not None and groups is not None and self.runs is not None:
            tasks += [
                loop.create_task(scheduler.loop()),
                loop.create_task(_reap_orphans(groups)),
                loop.create_task(self.runs.watch_stalls()),
                # A needs_review run whose branch someone merged by hand resolves itself.
                loop.create_task(HandMerges(daemon).watch()),
            ]
        tasks.append(
            loop.create_task(self.notifier.keep_informed(self._status_line, STATUS_SECONDS))
        )
        made.push_async_callback(_cancel, tasks)
        # First at shutdown: stop accepting, answer what is held, let connections go.
        made.push_async_callback(self._close_clients, daemon)
        self._install_signals()
        made.callback(_remove_signals, loop)
        print(layout.operator_socket, flush=True)
        log.info(
            "sloopd %s serving %s on %s", api.SOFTWARE_VERSION, layout.repo, layout.operator_socket
        )
        self.notifier.ready(f"serving {layout.repo}")
        made.callback(self.notifier.stopping)
        self.ready.set()

    def _take_lock(self) -> None:
        """The store's lock, on a disk with room, with no other daemon on our socket."""
        full = diskfull.refusal(self.layout.state_dir)
        if full is not None:
            raise DiskFull(full)  # before the lock: even taking it writes
        try:
            self._lock.acquire()
        except Exception as exc:
            raise refusal(self.layout, exc) from exc
        self._made.callback(self._lock.release)  # the last thing undone
        refuse_if_served(self.layout)

    def _open_store(self) -> tuple[Store | None, str | None]:
        """The store, or None and why a newer one is refused (then only 'show' answers)."""
        try:
            return Store.open(self.layout.state_dir, migrate=True), None
        except StoreTooNew as exc:
            log.error("%s; serving only 'show' until that changes", exc)
            return None, str(exc)
        except (StoreUnavailable, OSError) as exc:
            raise refusal(self.layout, exc) from exc

    def _close_store(self, store: Store) -> None:
        """Last but the lock: every step undone before it may still write."""
        if self._said_started and self.daemon is not None:
            with contextlib.suppress(Exception):
                self.daemon.append_event("daemon_stopped", data={"pid": os.getpid()})
        store.close()
        if self.daemon is not None:
            self.daemon.store = None

    async def _reconcile(self, daemon: Daemon, store: Store) -> tuple[Scheduler, ProcessGroups]:
        """After a crash: kill what the last daemon left, settle its runs in flight."""
        made = self._made
        notices = Notices.started(daemon)  # first: recovery's settles are told too
        # Reads the stop's own settles, then gives deliveries a short grace.
        made.push_async_callback(notices.close)
        peers.become_subreaper()
        # Every git call of ours is marked, and a killed daemon's calls may still run:
        # wait for them before recovery reads a ref to decide whether a merge happened.
        marker = str(self.layout.state_dir)
        tooltree.mark_tools(marker)
        killed_tools = tooltree.await_survivors(marker, SURVIVOR_WAIT_SECONDS)
        if killed_tools:
            log.warning("killed %d git calls a previous daemon left running", len(killed_tools))
        groups = ProcessGroups(self.layout.state_dir / "groups")
        killed = groups.kill_recorded_leftovers()
        if killed:
            log.warning("killed %d leftover processes of a previous daemon", len(killed))
        gate.load(daemon)
        if daemon.config.sandbox != "none":
            daemon.sandbox_problem = sandbox_probe()
            if daemon.sandbox_problem is not None:
                log.error("agents cannot be sandboxed here: %s", daemon.sandbox_problem)
        compose.choose_checkouts(daemon)
        # Output never takes the free space the next runs' checkouts need (logroom).
        room = DiskRoom(self.layout.state_dir, lambda: daemon.config.repo.disk_reserve)
        counted = self.metrics.log_records.inc
        sink = LogSink(store, counted, daemon.feed_notices, room, daemon.log_cache)
        made.callback(sink.close)  # after every child that writes to it has stopped
        ray = compose.ray_executor(daemon)
        if ray is not None:
            made.push_async_callback(ray.close)  # the driver exits; Ray kills its actors
        launchers = compose.local_launchers(self.layout, groups)
        made.push_async_callback(groups.stop_all)  # the children those launchers start
        if ray is not None:
            launchers["ray"] = compose.ray_launcher(daemon, ray)
            await ray.start()  # connecting takes seconds: begin before any claim
        self.runs = runs = compose.run_manager(
            daemon,
            sink,
            self._active,
            launchers,
            worker_connections=compose.worker_connection_budget(),
        )
        made.push_async_callback(_stop_runs, runs)
        runs.worker_sockets.clear_stale()
        # Before any claim: a store restored from an older backup numbers past what the
        # runs it forgot left in git and in the state directory.
        found = leftovers.survey(self.layout)
        leftovers.number_past(store, found)
        scheduler = Scheduler(daemon, runs.start, attempt_floor=found.attempt_floor)
        # The one late wiring step (see Daemon.connect): before recovery settles anything.
        daemon.connect(poke=scheduler.poke, events_appended=notices.poke)
        recovered = await recover_runs(runs)
        for run_id, outcome in recovered.settled:
            log.warning("%s was in flight when the last daemon ended: settled %s", run_id, outcome)
        daemon.model = ReadModel.install(store, daemon.changes)
        for run_id in recovered.continuing:
            log.warning("%s was in flight when the last daemon ended: it continues", run_id)
            runs.resume(run_id)
        return scheduler, groups

    async def _serve_metrics(self) -> None:
        if not self.options.metrics:
            return
        try:
            host, port = parse_address(self.options.metrics)
            metrics_server = await serve_metrics(self.metrics, host, port)
        except (ValueError, OSError) as exc:
            raise StartupError(f"cannot serve metrics on {self.options.metrics}: {exc}") from exc
        self._made.callback(metrics_server.close)
        log.info("metrics on http://%s/metrics", self.options.metrics)

    def _status_line(self) -> str:
        daemon = self.daemon
        if daemon is None or daemon.store is None:
            return f"store refused: {daemon.refused if daemon else 'starting'}"
        queued = daemon.store.scalar("triggers_queued_count")
        gate_state = daemon.gate.state
        return (
            f"{len(daemon.active_runs)} runs in flight, {queued or 0} "
            f"triggers queued, gate {gate_state}"
        )

    async def _listen(self, daemon: Daemon) -> None:
        path = self.layout.operator_socket
        try:
            paths.make_private_dir(self.layout.socket_dir)
        except (OSError, paths.RepoError) as exc:
            raise StartupError(f"cannot prepare socket directory: {exc}") from exc
        if path.exists() or path.is_symlink():
            if answers(path):
                raise StartupError(f"another daemon already answers on {path}")
            path.unlink()  # stale: we hold the store lock, nobody else serves it
        dispatcher: Dispatcher
        if self.runs is None:
            dispatcher = OperatorDispatcher(refused_handlers(daemon))
        else:
            dispatcher = operator_dispatcher(operator_handlers(daemon, self.runs))
        loop = asyncio.get_running_loop()

        dispatcher.observer = self.metrics.observe_request
        refusing = RefusingDispatcher()

        def factory() -> Connection:
            conn = Connection(
                dispatcher.handle_line,
                self._connections.discard,
                admit=peers.admit_operator_peer,
                refuse_line=refusing.handle_line,
            )
            self._connections.add(conn)
            return conn

        self._server = await loop.create_unix_server(
            factory, sock=bound_private(path), backlog=LISTEN_BACKLOG
        )
        self._made.callback(self._unlisten)

    def _unlisten(self) -> None:
        """Stop listening and remove the socket file, once: removed again later, it could
        be the socket of a daemon that started on the same path meanwhile."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        self.layout.operator_socket.unlink(missing_ok=True)

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_stop_signal, sig)
        loop.add_signal_handler(signal.SIGHUP, self._reload)
        loop.add_signal_handler(signal.SIGUSR1, log_tasks)

    def _on_stop_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second %s: exiting at once", sig.name)
            os._exit(1)
        log.info("%s: shutting down", sig.name)
        self.request_stop()

    def _reload(self) -> None:
        assert self.daemon is not None
        self.notifier.reloading()
        try:
            self.daemon.config = config.load(self.layout.repo)
            log.info("configuration reloaded")
            self._check_clis()
            self.daemon.changes.bump()  # parallel and the flows decide tickets' 'waiting'
            self.daemon.poke()  # a higher parallel or a restored flow may free work
        except config.ConfigError as exc:
            log.error("reload refused, keeping the last good configuration: %s", exc)
        self.notifier.ready(self._status_line())

    def _check_clis(self) -> None:
        """Each configured preset's CLI must resolve inside the sandbox: say which does not."""
        assert self.daemon is not None
        self.daemon.unseen_clis = cli_sight.checked(self.daemon.config, self.layout.repo)
        for row in self.daemon.unseen_clis:
            log.warning("agent preset %r: %s", row["preset"], row["problem"])

    async def _close_clients(self, daemon: Daemon) -> None:
        """Held requests answer first (show, then logs/events), then connections close."""
        await daemon.changes.close(within_s=1.0)
        server = self._server
        if server is None:
            return
        server.close()
        await daemon.feed_notices.stop()
        for conn in list(self._connections):
            conn.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)
        self._unlisten()


# --- what start-up makes, undone ----------------------------------------------------


def _remove_signals(loop: asyncio.AbstractEventLoop) -> None:
    """A signal during shutdown does what it does to any process (SIGUSR1 still dumps)."""
    for sig in (*STOP_SIGNALS, signal.SIGHUP):
        with contextlib.suppress(Exception):
            loop.remove_signal_handler(sig)


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _stop_runs(runs: RunManager) -> None:
    await runs.stop_all()
    runs.branches.stop_sweeping()  # the trash's backlog never holds a stop


async def _reap_orphans(groups: ProcessGroups) -> None:
    """As a subreaper we inherit agents' orphans; collect them when they exit."""
    while True:
        await asyncio.sleep(ORPHAN_REAP_SECONDS)
        peers.reap_adopted_orphans(groups.leader_pids)
