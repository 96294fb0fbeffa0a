"""The merge queue (DESIGN rule 9): many runs' passing work into main, in order.

A run whose walk reaches a landing's ``sync`` (``sloopd.flows.landings``) joins the
repository's queue.  Its ``sync`` builds its candidate on the candidate of the run
ahead (``main + A + B``), its gate stages run on that candidate while those of the
runs ahead run too (up to ``[repo] merge_window``), and its ``ff_only`` lands only
after every run ahead has landed or left, so ``main`` only ever moves to a candidate
whose gates passed.  A failure counts against a run only once the runs ahead in its
candidate have passed theirs; a run that leaves gets those behind it rebuilt, which
spends none of their ``returns``.

The queue lives in memory: after a restart the runs in flight that were at a landing
join the new queue again in their old order and build their candidates anew
(sloopd.resume.landing_order).  The run driver (sloopd.runs.runner) asks it before a
landing's stages and after each; nothing else moves a run through it.

Beside the queue: main's slot (``merge_slot``: one run moves main at a time, from a
``sync`` through the ``ff_only`` right after it) and the watch that resolves, as
merged, the needs_review runs whose branch main now holds (``hand_merges``), and
what the driver does at a landing (``steps``: it names the run, its facts and its
records by narrow protocols, never by the runs layer).

May import: ``wire``, ``store``, ``util``, ``flows``, ``core``, ``queue`` (the resolution
a hand merge records) and ``git``; the runs layer imports it.
"""
