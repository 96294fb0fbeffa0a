"""The worker socket's machinery: credentials, the dispatcher, the sockets themselves.

An agent reaches Sloop only through its run's worker socket.  This layer owns what
makes that socket safe to hand to untrusted code: who holds the one live credential of
a run (``credentials``), how a line becomes a call of a worker verb with every refusal
the same ``unauthorized`` (``dispatcher``), the socket files with their connection
bounds (``sockets``), and the verbs themselves (``verbs``: ``brief``, ``show``,
``note``, ``verdict``), which read a run as ``show`` does and append to its stage log
through its records, named by a narrow protocol.

May import: ``sloopd.wire``, ``sloopd.store``, ``sloopd.util``, ``sloopd.flows``,
``sloopd.core``, ``sloopd.queue`` (references), ``sloopd.views`` (what ``show`` and
``brief`` tell), ``sloopd.proc`` (the checkout's path in the sandbox); never
``sloopd.runs``, which imports it.
"""
