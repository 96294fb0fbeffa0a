"""The wire: the protocol schema every client shares, and how lines become replies.

Owns the envelope, error codes, verb names and argument shapes (``api``, the
one module ``sloopctl`` imports), NDJSON framing per connection
(``connection``) and turning a request into a handler call (``dispatch``).
May import: nothing of ``sloopd``; ``sloopctl`` and the layers above it import it.
"""
