"""Continuing the runs a stopped or crashed daemon left in flight (issue 38).

At start-up, before any claim: each run in flight is read from its stage log and
git.  What the stop cut short is recorded (an execution ends ``interrupted``, a panel
seat's sitting ``seat_interrupted``, with the usage its stored output shows); a run
whose walk had ended, or whose merge moved main, settles as before; a run whose log
no longer replays or whose commits are gone settles ``aborted`` and its ticket is
queued again; every other run continues at the interrupted stage
(``RunManager.resume``), those at a merge-queue landing joining the queue again in
their old order.

May import: ``wire``, ``store``, ``util``, ``vendor``, ``flows``, ``core``, ``git``,
``landing`` and ``runs`` (whose driver it hands the runs to); only the composition
root imports it.
"""
