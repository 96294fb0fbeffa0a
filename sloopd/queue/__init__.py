"""The queue: tickets, triggers, the gate and the scheduler.

Owns ticket files (``tickets``), the queue verbs post/run/hold/ready
(``actions``), reference resolution and the show ladder's rungs (``refs``),
the gate's cooldown and pause (``gate``) and claiming due triggers
(``scheduler``).

May import: ``wire``, ``store``, ``util``, ``flows`` and ``core``; it starts runs
through a callback, never by importing ``runs``.
"""
