"""``sloopctl web``: a browser view of one daemon, served by a gateway of its own.

The gateway is a client of the operator socket like any other (the daemon knows
nothing of HTTP), so the socket stays the one authority surface: the gateway
adds no power the operator's socket does not have, and by default it uses only
the read verbs.  Modules:

- ``command``: the click command; imports nothing of aiohttp until it runs.
- ``settings``: the listen address, the loopback rule, where the token lives.
- ``auth``: the token, its file, and the checks every request passes
  (token, ``Host``, ``Origin``/``Sec-Fetch-Site``, the CSRF header).
- ``link``: asyncio calls to the operator socket, with ``sloopctl.client``'s
  error classes and reply checks.
- ``feeds``: one follower per feed (a ``show`` view, a run's log, the events)
  on the daemon's long-poll verbs, fanned out to every browser watching it.
- ``server``: the aiohttp application: pages, JSON reads, Server-Sent Events,
  the optional actions.
- ``static/``: the pages, plain HTML, CSS and JavaScript modules (package data).
"""
