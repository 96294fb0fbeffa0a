"""The gateway's HTTP side: pages, JSON reads, Server-Sent Events and the actions.

Every request passes ``guarded`` first (``sloopctl.web.auth`` says why each check
is there); every response, refusals included, carries ``SECURITY_HEADERS``. The
pages are static files; what they show comes from ``/api/*`` (one call each) and
``/sse/*`` (a subscription to a feed, ``sloopctl.web.feeds``). The operator verbs a
browser may reach are ``READ_VERBS`` and, with ``--allow-actions`` only, ``ACTIONS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import signal
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any, Final

import orjson
from aiohttp import web

from sloopctl.client import ClientError
from sloopctl.web import auth, logfile
from sloopctl.web.feeds import Feed, FeedLimit, Feeds
from sloopctl.web.link import Link
from sloopctl.web.settings import Settings
from sloopd.wire import api

HEARTBEAT_S: Final = 15.0
SESSION_SHOW_S: Final = 3.0  # a page's start waits no longer for the sandbox warning
REPO_TIMEOUT_S: Final = 2.0  # how long /api/session waits for the repository's name
# The arguments a browser may send with each action: nothing else reaches the socket.
ACTIONS: Final[dict[str, frozenset[str]]] = {
    "hold": frozenset({"ref"}),
    "ready": frozenset({"ref"}),
    "run": frozenset({"ref"}),
    "abort": frozenset({"run", "reason"}),
    # A needs_review run's way out (issue 33): resolution "merged" (by hand) or "dismissed".
    "resolve": frozenset({"run", "resolution", "reason"}),
    "pause": frozenset({"reason"}),
    "resume": frozenset(),
}
PAGES: Final = ("/", "/ticket/{ref}", "/run/{ref}", "/search", "/runs")
CONTENT_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
# No inline script or style, nothing from elsewhere, no frames, no plugins: data that
# slipped into markup could still not run. (Scripts set element.style through the
# CSSOM, which style-src does not restrict.)
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def resolver() -> str:
    """``alice via sloopctl web``: the gateway's user (whoever holds its token acts
    with that user's authority), or ``sloopctl web`` alone when no name is found."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = ""
    return f"{user} via sloopctl web" if user else "sloopctl web"


def refusal(status: int, word: str) -> web.Response:
    """A bare refusal: a fixed word, never anything the request carried."""
    return web.Response(status=status, text=word + "\n", content_type="text/plain")


# A person's browser opening a page without a valid token: most often a tab the
# gateway's restart (a new token) left behind, or a bookmark without the token.
# Fixed text, like every refusal: nothing of the request and nothing of the daemon.
ACCESS_ENDED_PAGE: Final = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="referrer" content="no-referrer">
<title>401 unauthorized · Sloop</title></head>
<body>
<h1>This view's access has ended</h1>
<p>401 unauthorized: this browser holds no valid token for this gateway.
The gateway restarted or its token changed, or this address was opened
without the token.</p>
<p>Open the URL <code>sloopctl web</code> printed (it ends in
<code>?token=&hellip;</code>); the token is also in the gateway's token file.</p>
</body>
</html>
"""


def unauthorized(request: web.Request) -> web.Response:
    """The one-word refusal for API clients; a readable page for a browser's page load."""
    page = not request.path.startswith(("/api/", "/sse/", "/static/"))
    if page and request.method == "GET" and "text/html" in request.headers.get("Accept", ""):
        return web.Response(status=401, text=ACCESS_ENDED_PAGE, content_type="text/html")
    return refusal(401, "unauthorized")


class Gateway:
    def __init__(self, settings: Settings, guard: auth.Guard, link: Link) -> None:
        self.settings = settings
        self.guard = guard
        self.link = link
        self.feeds = Feeds(link)
        self.static = _static_files()
        self.repository: str | None = None  # the daemon's repository folder, once known

    def application(self) -> web.Application:
        app = web.Application(middlewares=[self.guarded], client_max_size=64 * 1024)
        app.on_response_prepare.append(_add_security_headers)
        for page in PAGES:
            app.router.add_get(page, self.page)
        app.router.add_get("/static/{name}", self.static_file)
        app.router.add_get("/api/session", self.session)
        app.router.add_get("/api/show", self.show)
        app.router.add_get("/api/diff", self.diff)
        app.router.add_get("/api/runs", self.runs)
        app.router.add_get("/api/logs", self.logs)
        app.router.add_get("/api/log", self.log_file)
        app.router.add_post("/api/action", self.action)
        app.router.add_get("/sse/show", self.sse_show)
        app.router.add_get("/sse/logs", self.sse_logs)
        app.router.add_get("/sse/events", self.sse_events)
        app.on_shutdown.append(self._close_feeds)
        return app

    async def _close_feeds(self, _app: web.Application) -> None:
        await self.feeds.close()

    # -- the checks -----------------------------------------------------------------------

    @web.middleware
    async def guarded(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.guard.host_ok(request.headers.get("Host")):
            return refusal(403, "forbidden")  # DNS rebinding: a name we do not serve under
        offered = request.query.get(auth.TOKEN_QUERY)
        if offered is not None:
            if request.method != "GET" or not self.guard.token_ok(offered):
                return unauthorized(request)
            return self._enter(request)
        if not self.guard.token_ok(request.cookies.get(self.guard.cookie_name)):
            return unauthorized(request)
        writes = request.method not in ("GET", "HEAD")
        if writes and self.guard.write_refusal(request.headers) is not None:
            return refusal(403, "forbidden")
        return await handler(request)

    def _enter(self, request: web.Request) -> web.Response:
        """The token URL: set the session cookie, then drop the token from the address."""
        query = {k: v for k, v in request.query.items() if k != auth.TOKEN_QUERY}
        target = request.rel_url.with_query(query) if query else request.rel_url.with_query(None)
        response = web.HTTPSeeOther(location=str(target))
        response.set_cookie(
            self.guard.cookie_name,
            self.guard.token,
            httponly=True,
            samesite="Strict",
            path="/",
        )
        return response

    # -- pages and files ------------------------------------------------------------------

    async def page(self, request: web.Request) -> web.Response:
        return self._file("index.html")

    async def static_file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.static:  # a fixed list: no path from a request reaches the disk
            return refusal(404, "not found")
        return self._file(name)

    def _file(self, name: str) -> web.Response:
        body = self.static[name]
        content_type = CONTENT_TYPES[Path(name).suffix]
        return web.Response(body=body, headers={"Content-Type": content_type})

    # -- reads ---------------------------------------------------------------------------

    async def session(self, request: web.Request) -> web.Response:
        return _json(
            {
                "actions": self.settings.allow_actions,
                "unsafe": await self._sandbox_warning(),
                "csrf": self.guard.csrf,
                "version": api.SOFTWARE_VERSION,
                "feeds": self.feeds.describe(),
                "long_poll_refused": sorted(self.feeds.polls.refused),
                "repo": await self._repository(),
            }
        )

    async def _sandbox_warning(self) -> str | None:
        """The daemon's ``UNSAFE`` sentence (``sandbox = "none"``), for every page's header.

        Read per page load, so a daemon reloaded into or out of ``none`` is seen on the
        next page; null when all is well or the daemon does not answer now.
        """
        try:
            reply = await self.link.call("show", {"limit": 1}, SESSION_SHOW_S)
        except ClientError:
            return None
        data = reply.data if reply.ok and isinstance(reply.data, dict) else {}
        daemon = data.get("daemon")
        sandbox = daemon.get("sandbox") if isinstance(daemon, dict) else None
        warning = sandbox.get("warning") if isinstance(sandbox, dict) else None
        return warning if isinstance(warning, str) and warning else None

    async def _repository(self) -> str | None:
        """The repository's folder name, for the header and tab titles: asked of the
        daemon once (its ``show`` names the repo), null while the daemon does not answer."""
        if self.repository is None:
            try:
                # Briefly: a page waits for the session, and the name can come later.
                reply = await self.link.call("show", {}, timeout=REPO_TIMEOUT_S)
            except ClientError:
                return None
            daemon = reply.data.get("daemon") if reply.ok and isinstance(reply.data, dict) else None
            repo = daemon.get("repo") if isinstance(daemon, dict) else None
            if isinstance(repo, str) and repo:
                self.repository = PurePosixPath(repo).name
        return self.repository

    async def show(self, request: web.Request) -> web.Response:
        args: dict[str, Any] = {}
        if request.query.get("ref"):
            args["ref"] = request.query["ref"]
        if request.query.get("limit", "").isdigit():
            args["limit"] = int(request.query["limit"])
        return await self._relay("show", args)

    async def runs(self, request: web.Request) -> web.Response:
        """The /runs page's read: a page of settled runs, one state or all."""
        args: dict[str, Any] = {}
        if request.query.get("state") in api.TERMINAL_RUN_STATES:
            args["state"] = request.query["state"]
        for name in ("limit", "offset"):
            if request.query.get(name, "").isdigit():
                args[name] = int(request.query[name])
        args["limit"] = args.get("limit") or api.DEFAULT_RUNS_PAGE
        return await self._relay("runs", args)

    async def diff(self, request: web.Request) -> web.Response:
        args: dict[str, Any] = {"run": request.query.get("run", "")}
        if request.query.get("max_bytes", "").isdigit():
            args["max_bytes"] = int(request.query["max_bytes"])
        return await self._relay("diff", args)

    async def logs(self, request: web.Request) -> web.Response:
        """Records after a cursor (or from the first): what the live feed's buffer lacks."""
        base = logfile.selection(request.query)
        if base is None:
            return refusal(400, "bad request")
        limit = request.query.get("limit", "")
        count = min(int(limit), logfile.MAX_LIMIT) if limit.isdigit() else logfile.PAGE_LIMIT
        try:
            envelope = await logfile.records_after(
                self.link, base, request.query.get("after") or None, max(count, 1)
            )
        except ClientError as exc:
            return _json(exc.envelope(), status=502)
        return _json(envelope)

    async def log_file(self, request: web.Request) -> web.StreamResponse:
        """The whole selection as a text attachment, streamed page by page: as the page
        renders it (``sloopctl logs --all``), or as stored with ``raw=1`` (``--raw``)."""
        base = logfile.selection(request.query)
        if base is None:
            return refusal(400, "bad request")
        raw = request.query.get("raw") == "1"
        return await logfile.download(request, self.link, base, raw=raw)

    async def _relay(self, verb: str, args: dict[str, Any]) -> web.Response:
        """The daemon's envelope as it answered (its strings cleaned for display)."""
        try:
            reply = await self.link.call(verb, args)
        except ClientError as exc:
            return _json(exc.envelope(), status=502)
        return _json(reply.envelope)

    # -- actions -------------------------------------------------------------------------

    async def action(self, request: web.Request) -> web.Response:
        if not self.settings.allow_actions:
            return refusal(403, "actions are off: start the gateway with --allow-actions")
        try:
            body = orjson.loads(await request.read())
        except (orjson.JSONDecodeError, ValueError):
            return refusal(400, "bad request")
        verb = body.get("verb") if isinstance(body, dict) else None
        args = body.get("args", {}) if isinstance(body, dict) else None
        if not isinstance(verb, str) or verb not in ACTIONS or not isinstance(args, dict):
            return refusal(400, "bad request")
        allowed = ACTIONS[verb]
        if not set(args) <= allowed or not all(isinstance(v, str) for v in args.values()):
            return refusal(400, "bad request")
        if verb == "resolve":
            # Who resolved it, as `sloopctl resolve` says it (the local user), and
            # where: never what the browser claims (it cannot send "by").
            args = {**args, "by": resolver()}
        return await self._relay(verb, args)

    # -- live feeds ----------------------------------------------------------------------

    async def sse_show(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, lambda: self.feeds.show(request.query.get("ref")))

    async def sse_logs(self, request: web.Request) -> web.StreamResponse:
        run = request.query.get("run")
        if not run:
            return refusal(400, "bad request")
        stage = request.query.get("stage") or None
        return await self._stream(request, lambda: self.feeds.logs(run, stage))

    async def sse_events(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, lambda: self.feeds.events(request.query.get("scope")))

    async def _stream(self, request: web.Request, find: Callable[[], Feed]) -> web.StreamResponse:
        try:
            feed = find()
        except FeedLimit:
            return refusal(503, "busy")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        sub = feed.subscribe()
        try:
            await response.write(b"retry: 2000\n\n")
            while True:
                try:
                    item = await asyncio.wait_for(sub.queue.get(), HEARTBEAT_S)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")  # finds a browser that left
                    continue
                await response.write(item)
                if sub.closed and sub.queue.empty():
                    break
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            feed.unsubscribe(sub)
        return response


async def _add_security_headers(_request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(SECURITY_HEADERS)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _static_files() -> dict[str, bytes]:
    """Every file of the package's static folder, read once at start."""
    folder = resources.files("sloopctl.web").joinpath("static")
    return {
        entry.name: entry.read_bytes()
        for entry in folder.iterdir()
        if entry.is_file() and Path(entry.name).suffix in CONTENT_TYPES
    }


async def serve(
    settings: Settings, token: str, started: Callable[[int], None], stop: asyncio.Event
) -> None:
    """Listen, call ``started`` with the port bound, serve until ``stop`` is set."""
    link = Link(settings.socket, verbatim=settings.verbatim)
    placeholder = auth.Guard(token, settings.listen.port, frozenset())
    gateway = Gateway(settings, placeholder, link)
    runner = web.AppRunner(gateway.application(), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, settings.listen.host, settings.listen.port, shutdown_timeout=2.0)
    await site.start()
    try:
        port = _bound_port(runner)
        # Known only now (--listen …:0 picks a port): the hosts and the cookie name.
        gateway.guard = auth.Guard(token, port, auth.allowed_hosts(settings.listen, port))
        started(port)
        await stop.wait()
    finally:
        await runner.cleanup()


def _bound_port(runner: web.AppRunner) -> int:
    address = runner.addresses[0]
    return int(address[1])


def run_until_signalled(settings: Settings, token: str, started: Callable[[int], None]) -> None:
    """The blocking entry point: serve until SIGINT or SIGTERM."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await serve(settings, token, started, stop)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(sig)

    asyncio.run(main())
