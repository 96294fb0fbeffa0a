"""The ``sloopctl web`` command: parse, check, then hand over to the gateway.

aiohttp and the gateway are imported inside the command only, so every other
``sloopctl`` command starts as fast as before.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from sloopctl import locate
from sloopctl.client import Client, ClientError
from sloopctl.invoke import EXIT_USAGE, common_options, fail, no_answer, options
from sloopctl.web import auth
from sloopctl.web.settings import (
    DEFAULT_LISTEN,
    Settings,
    SettingsError,
    check_listen,
    default_token_file,
    parse_listen,
    prepare_token_dir,
)


@click.command()
@click.option(
    "--listen",
    metavar="HOST:PORT",
    default=DEFAULT_LISTEN,
    show_default=True,
    help="Where to serve. Port 0 picks a free one. Loopback only unless --allow-remote.",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Add hold, ready, run, abort, pause and resume buttons (they call those verbs). "
    "Without it the view is read-only.",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Accept a --listen address that is not loopback. The gateway speaks plain HTTP: "
    "the token (and with --allow-actions, the power to abort runs) crosses the network "
    "in the clear. Prefer an SSH tunnel to a loopback gateway.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="Where to write the access token (mode 0600). "
    "Default: $XDG_RUNTIME_DIR/sloopctl/web-PORT.token, else /tmp/sloopctl-UID/web-PORT.token.",
)
@common_options
def web(listen: str, allow_actions: bool, allow_remote: bool, token_file: Path | None) -> None:
    """Serve a live web view of this repository's daemon.

    A separate process: it talks to the operator socket like any client and
    serves pages on 127.0.0.1 (the dashboard, tickets, runs with their
    timeline, live output and diff, a search). It prints the URL to open,
    http://HOST:PORT/?token=…, once it listens; the token is also written to
    --token-file, and every request needs it (the page keeps it in an HttpOnly
    cookie). Read-only unless --allow-actions. Stop it with Ctrl-C.
    With --json the URL line is one JSON object (url, port, token_file,
    actions); --raw keeps terminal control sequences in the pages' text.
    See docs/web.md for the pages, the live feeds and the security model.
    """
    opts = options()
    try:
        where = locate.operator_endpoint(opts.socket)
    except locate.LocateError as exc:
        fail(str(exc))
    try:
        address = parse_listen(listen)
        check_listen(address, allow_remote)
    except SettingsError as exc:
        fail(str(exc), EXIT_USAGE)
    try:
        # The daemon must answer before anything listens: a typo'd socket fails here.
        with Client(where.socket, read_timeout=10.0) as client:
            client.call("show", {})
    except ClientError as exc:
        no_answer(exc, opts.json)
    settings = Settings(
        socket=where.socket,
        listen=address,
        allow_actions=allow_actions,
        token_file=token_file,
        verbatim=opts.raw,
    )
    # Imported here, not at the top: the other commands never load aiohttp.
    from sloopctl.web.server import run_until_signalled

    token = auth.new_token()
    written: list[Path] = []

    def started(port: int) -> None:
        path = token_file or default_token_file(port)
        try:
            prepare_token_dir(path.parent)
            auth.write_token_file(path, token)
        except (SettingsError, OSError) as exc:
            raise click.ClickException(f"cannot write the token file {path}: {exc}") from None
        written.append(path)
        url = f"{address.url(port)}/?{auth.TOKEN_QUERY}={token}"
        if opts.json:
            line = {"url": url, "port": port, "token_file": str(path), "actions": allow_actions}
            click.echo(orjson.dumps(line).decode())
        else:
            click.echo(url)
            mode = "actions allowed" if allow_actions else "read-only"
            click.echo(f"sloopctl web: {mode}; token in {path}; Ctrl-C stops", err=True)
        sys.stdout.flush()

    try:
        run_until_signalled(settings, token, started)
    except OSError as exc:  # the port is taken, the address is not ours
        fail(f"cannot listen on {listen}: {exc.strerror or exc}", EXIT_USAGE)
    finally:
        for path in written:
            auth.remove_token_file(path, token)
