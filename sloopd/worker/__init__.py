"""The worker socket's machinery: credentials, the dispatcher, the sockets themselves.

An agent reaches Sloop only through its run's worker socket.  This layer owns what
makes that socket safe to hand to untrusted code and knows nothing of runs: who holds
the one live credential of a run (``credentials``), how a line becomes a call of a
worker verb with every refusal the same ``unauthorized`` (``dispatcher``), and the
socket files with their connection bounds (``sockets``).  The verbs themselves
(``brief``, ``show``, ``note``, ``verdict``) append to a run's stage log, so they live
with the runs, in ``sloopd.runs.worker_verbs``.

May import: ``sloopd.wire`` and ``sloopd.util``.
"""
