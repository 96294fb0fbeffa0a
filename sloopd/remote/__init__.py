"""Stages on other machines: the Ray executor (``[executor] backend = "ray"``).

The daemon's side (``launcher``, ``child``, ``cluster_gate``) and the node's side
(``node``, ``room``, ``relay``) meet in ``messages``, the schema of every pipe between
them; ``driver`` is the separate process that is the Ray driver, so Ray is never
imported into the daemon's loop.  A node runs a stage with the daemon host's own
launcher (``sloopd.proc.launchers``) and workspace collect (``sloopd.git.workspace``).

May import: ``wire``, ``store``, ``util``, ``flows``, ``core``, ``queue``, ``proc`` and
``git``; never ``runs``.
"""
