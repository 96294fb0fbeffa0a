"""What a reply carries of a ticket's body: at most ``MAX_SHOWN_BODY_BYTES`` of it.

A ticket may be a megabyte (``repo.max_ticket_bytes``), and a body read by every
``show`` of a dashboard follower or every ``brief`` of an agent would be carried
each time.  Past the bound the body is cut at a character boundary and a marker
line says how large it is and where the whole of it is; ``body_bytes`` and
``body_clipped`` say the same to a program.
"""

from __future__ import annotations

from typing import Any

from sloopd.wire.api import MAX_SHOWN_BODY_BYTES

MARKER_START = "\n\n[sloopd: "


def shown(body: str, whole: str, limit: int = MAX_SHOWN_BODY_BYTES) -> dict[str, Any]:
    """``{body, body_bytes, body_clipped}`` for a reply; ``whole`` names where all of it is."""
    data = body.encode()
    if len(data) <= limit:
        return {"body": body, "body_bytes": len(data), "body_clipped": False}
    # "ignore" drops a character the cut split in two: the kept text is valid UTF-8.
    kept = data[:limit].decode("utf-8", "ignore")
    marker = (
        f"{MARKER_START}the body is clipped here: it is {len(data)} bytes, the first "
        f"{len(kept.encode())} are shown; {whole}]"
    )
    return {"body": kept + marker, "body_bytes": len(data), "body_clipped": True}
