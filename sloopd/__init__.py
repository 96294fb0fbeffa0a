"""sloopd: the daemon that owns a repository's Sloop state."""

from sloopd.wire.api import SOFTWARE_VERSION as __version__

__all__ = ["__version__"]
