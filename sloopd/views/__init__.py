"""The read side: what ``show``, ``logs`` and ``events`` answer.

Owns the dashboard and the detail of tickets, runs and projects (``show``,
``runview``) and the keyset-paged feeds (``feeds``, with ``logpages``,
``eventpages`` and ``runfacts``), long-poll included.  May import ``wire``,
``store``, ``util``, ``flows``, ``core`` and ``queue`` (for references); it
never imports ``runs``: no process or git code is reachable from a read.
"""
