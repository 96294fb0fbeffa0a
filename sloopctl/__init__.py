"""sloopctl: the thin client of a Sloop daemon.

Each command sends one request envelope to the daemon's Unix socket and renders
the reply; all state lives in the daemon.  Only ``sloopd.wire.api`` is shared with
the daemon, so the client starts fast and cannot drift from the wire schema.
"""
