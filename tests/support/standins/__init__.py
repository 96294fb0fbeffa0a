"""Stand-ins for vendor APIs the real agent CLIs talk to, on loopback."""
