"""Stages on other machines: the Ray executor (``[executor] backend = "ray"``).

The daemon's side (``launcher``, ``shipping``) and the node's side (``node``,
``room``, ``relay``) meet in ``messages``; ``driver`` is the separate process
that is the Ray driver, so Ray is never imported into the daemon's loop.
"""
