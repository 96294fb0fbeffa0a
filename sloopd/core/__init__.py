"""What every layer above shares: layout, configuration, state, rows, the log sink.

Owns the repository and socket layout (``paths``), the validated
``sloop.toml`` (``config``), the daemon's shared state (``state``), wire rows
built from store rows (``rows``), batched log ingestion (``logsink``), the
choice of committed events told to webhooks (``notices``), the requests held for
news on the feeds (``longpoll``), the read model (``model``, ``changelog``),
whether the configured agent CLIs resolve inside the sandbox (``cli_sight``) and what
runs a restored store forgot left in git and the state directory (``leftovers``).
May import: ``wire``, ``store``, ``util``, ``vendor``, ``flows``, ``ops``, ``proc`` (the
sandbox's rules) and ``git`` (``paths`` locates the repository through ``git.runner``);
it names runs in flight by the ``LiveRun`` interface, never by the runs layer.
"""
