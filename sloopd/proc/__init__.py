"""Process isolation: the children a daemon starts, their sandbox, their output, their peers.

Owns the process groups every child runs in (``children``: spawn, signal a group,
reap, the marker a crashed daemon's successor finds survivors by), the line splitter
and output budget of their pipes (``lines``), the allowlisted environment a child gets
(``environment``), the bubblewrap command line and its probe (``sandbox``), and the
operator socket's check that a peer does not descend from a child (``peers``), and
the seam a stage's child is started through, wherever it runs (``stage_io``: the
``Launcher`` protocol, ``StageLaunch`` in, ``StageEnd`` out), and whether a program
resolves inside the sandbox (``sight``).  It
knows nothing of runs, stages or the store: what a child is *for* is the caller's.

May import: ``sloopd.util`` only.
"""
