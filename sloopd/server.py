"""The daemon's lifecycle: ``Server(options).run()`` = startup, serve, shutdown.

``run()`` blocks (the console script); ``serve()`` is awaitable so tests can
run the real daemon in-process as well as a subprocess.
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
from sloopd.remote.launcher import RayExecutor
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
STOPPED_REASON = "the daemon stopped while the run was in flight"

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
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[Connection] = set()
        self._signals = 0
        self.runs: RunManager | None = None
        # The runs in flight: the RunManager's registry, the daemon's live read side.
        self._active: dict[str, ActiveRun] = {}
        self._groups: ProcessGroups | None = None
        self._sink: LogSink | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._last_status = ""
        self.metrics = Metrics()
        self._metrics_server: asyncio.AbstractServer | None = None
        self.notices: Notices | None = None
        self._ray: RayExecutor | None = None

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
        layout = self.layout
        self._take_lock()
        try:
            settings = config.load(layout.repo)
        except config.ConfigError as exc:
            self._lock.release()
            raise StartupError(f"refusing to start: {exc}") from exc
        store, refused = self._open_store()
        self.daemon = Daemon(
            layout=layout,
            config=settings,
            store=store,
            refused=refused,
            metrics=self.metrics,
            active_runs=self._active,
        )
        self._check_clis()
        if store is not None:
            try:
                scheduler: Scheduler | None = await self._reconcile()
            except (StoreUnavailable, OSError) as exc:
                # Recovery must record what it decides; without a writable store it
                # decides nothing and leaves everything for the next start.
                store.close()
                self._lock.release()
                raise refusal(layout, exc) from exc
        else:
            scheduler = None
            # Even a daemon that refuses its store ends what a crashed one left.
            ProcessGroups(layout.state_dir / "groups").kill_recorded_leftovers()
        await self._listen()
        await self._serve_metrics()
        try:
            write_info(layout)
        except OSError as exc:
            await self._abandon_startup()
            raise refusal(layout, exc) from exc
        loop = asyncio.get_running_loop()
        if store is not None:
            try:
                self.daemon.append_event("daemon_started", data={"pid": os.getpid()})
            except StoreUnavailable as exc:
                log.warning("daemon_started not recorded: %s", exc)
            self.metrics.watch(self.daemon)
        if scheduler is not None and self.runs is not None:
            self._tasks += [
                loop.create_task(scheduler.loop()),
                loop.create_task(self._reap_orphans()),
                loop.create_task(self.runs.watch_stalls()),
                # A needs_review run whose branch someone merged by hand resolves itself.
                loop.create_task(HandMerges(self.daemon).watch()),
            ]
        self._tasks.append(loop.create_task(self._keep_systemd_informed()))
        self._install_signals()
        print(layout.operator_socket, flush=True)
        log.info(
            "sloopd %s serving %s on %s", api.SOFTWARE_VERSION, layout.repo, layout.operator_socket
        )
        self.notifier.ready(f"serving {layout.repo}")
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
        try:
            refuse_if_served(self.layout)
        except StartupError:
            self._lock.release()
            raise

    def _open_store(self) -> tuple[Store | None, str | None]:
        """The store, or None and why a newer one is refused (then only 'show' answers)."""
        try:
            return Store.open(self.layout.state_dir, migrate=True), None
        except StoreTooNew as exc:
            log.error("%s; serving only 'show' until that changes", exc)
            return None, str(exc)
        except (StoreUnavailable, OSError) as exc:
            self._lock.release()
            raise refusal(self.layout, exc) from exc

    async def _abandon_startup(self) -> None:
        """Undo what start-up opened, for a refusal found after the daemon listened."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(FileNotFoundError):
                self.layout.operator_socket.unlink()
        if self._metrics_server is not None:
            self._metrics_server.close()
        if self.daemon is not None and self.daemon.store is not None:
            self.daemon.store.close()
            self.daemon.store = None
        self._lock.release()

    async def _reconcile(self) -> Scheduler:
        """After a crash: kill what the last daemon left, settle its runs in flight."""
        assert self.daemon is not None and self.daemon.store is not None
        self.notices = Notices.started(self.daemon)  # first: recovery's settles are told too
        peers.become_subreaper()
        # Every git call of ours is marked, and a killed daemon's calls may still run:
        # wait for them before recovery reads a ref to decide whether a merge happened.
        marker = str(self.layout.state_dir)
        tooltree.mark_tools(marker)
        killed_tools = tooltree.await_survivors(marker, SURVIVOR_WAIT_SECONDS)
        if killed_tools:
            log.warning("killed %d git calls a previous daemon left running", len(killed_tools))
        self._groups = ProcessGroups(self.layout.state_dir / "groups")
        killed = self._groups.kill_recorded_leftovers()
        if killed:
            log.warning("killed %d leftover processes of a previous daemon", len(killed))
        gate.load(self.daemon)
        if self.daemon.config.sandbox != "none":
            self.daemon.sandbox_problem = sandbox_probe()
            if self.daemon.sandbox_problem is not None:
                log.error("agents cannot be sandboxed here: %s", self.daemon.sandbox_problem)
        daemon = self.daemon
        # Output never takes the free space the next runs' checkouts need (logroom).
        room = DiskRoom(self.layout.state_dir, lambda: daemon.config.repo.disk_reserve)
        store = daemon.require_store()
        self._sink = LogSink(store, self.metrics.log_records.inc, daemon.feed_notices, room)
        launchers = compose.local_launchers(self.layout, self._groups)
        self._ray = compose.ray_executor(self.daemon)
        if self._ray is not None:
            launchers["ray"] = compose.ray_launcher(self.daemon, self._ray)
            await self._ray.start()  # connecting takes seconds: begin before any claim
        self.runs = compose.run_manager(
            self.daemon,
            self._sink,
            self._active,
            launchers,
            worker_connections=compose.worker_connection_budget(),
        )
        self.runs.worker_sockets.clear_stale()
        # Before any claim: a store restored from an older backup numbers past what the
        # runs it forgot left in git and in the state directory.
        found = leftovers.survey(self.layout)
        leftovers.number_past(self.daemon.store, found)
        scheduler = Scheduler(self.daemon, self.runs.start, attempt_floor=found.attempt_floor)
        # The one late wiring step (see Daemon.connect): before recovery settles anything.
        self.daemon.connect(poke=scheduler.poke, events_appended=self.notices.poke)
        for run_id, outcome in await self.runs.recover():
            log.warning("%s was in flight when the last daemon ended: settled %s", run_id, outcome)
        self.daemon.model = ReadModel.install(self.daemon.store, self.daemon.changes)
        return scheduler

    async def _serve_metrics(self) -> None:
        if not self.options.metrics:
            return
        try:
            host, port = parse_address(self.options.metrics)
            self._metrics_server = await serve_metrics(self.metrics, host, port)
        except (ValueError, OSError) as exc:
            raise StartupError(f"cannot serve metrics on {self.options.metrics}: {exc}") from exc
        log.info("metrics on http://%s/metrics", self.options.metrics)

    async def _keep_systemd_informed(self) -> None:
        """WATCHDOG=1 at half WatchdogSec from the loop itself (a stuck loop trips
        it), and a STATUS= line kept current."""
        usec = int(os.environ.get("WATCHDOG_USEC", "0") or 0)
        interval = usec / 2_000_000 if usec > 0 else STATUS_SECONDS
        while True:
            if usec > 0:
                self.notifier.send("WATCHDOG=1")
            try:
                status = self._status_line()
            except StoreUnavailable:
                status = self._last_status  # the store is busy: say nothing new
            if status != self._last_status:
                self.notifier.status(status)
                self._last_status = status
            await asyncio.sleep(min(interval, STATUS_SECONDS))

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

    async def _reap_orphans(self) -> None:
        """As a subreaper we inherit agents' orphans; collect them when they exit."""
        groups = self._groups
        assert groups is not None
        while True:
            await asyncio.sleep(ORPHAN_REAP_SECONDS)
            peers.reap_adopted_orphans(groups.leader_pids)

    async def _listen(self) -> None:
        assert self.daemon is not None
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
            dispatcher = OperatorDispatcher(refused_handlers(self.daemon))
        else:
            dispatcher = operator_dispatcher(operator_handlers(self.daemon, self.runs))
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

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
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
        self._last_status = self._status_line()
        self.notifier.ready(self._last_status)

    def _check_clis(self) -> None:
        """Each configured preset's CLI must resolve inside the sandbox: say which does not."""
        assert self.daemon is not None
        self.daemon.unseen_clis = cli_sight.checked(self.daemon.config, self.layout.repo)
        for row in self.daemon.unseen_clis:
            log.warning("agent preset %r: %s", row["preset"], row["problem"])

    async def _close_clients(self) -> None:
        """Held requests answer first (show, then logs/events), then connections close."""
        if self.daemon is not None:
            await self.daemon.changes.close(within_s=1.0)
        if self._server is None:
            return
        self._server.close()
        if self.daemon is not None:
            await self.daemon.feed_notices.stop()
        for conn in list(self._connections):
            conn.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)
        with contextlib.suppress(FileNotFoundError):
            self.layout.operator_socket.unlink()

    async def shutdown(self) -> None:
        self.notifier.stopping()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        await self._close_clients()
        with contextlib.suppress(FileNotFoundError):
            self.layout.daemon_info.unlink()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._metrics_server is not None:
            self._metrics_server.close()
        if self.runs is not None:
            await self.runs.stop_all(STOPPED_REASON)
            self.runs.branches.stop_sweeping()  # the trash's backlog never holds a stop
        if self._groups is not None:
            await self._groups.stop_all()
        if self._ray is not None:
            await self._ray.close()  # the driver exits; Ray kills every actor it owned
        if self._sink is not None:
            self._sink.close()
        if self.notices is not None:  # reads the stop's own settles; then a short grace
            await self.notices.close()
        if self.daemon is not None and self.daemon.store is not None:
            with contextlib.suppress(Exception):
                self.daemon.append_event("daemon_stopped", data={"pid": os.getpid()})
            self.daemon.store.close()
            self.daemon.store = None
        self._lock.release()
        log.info("stopped")
