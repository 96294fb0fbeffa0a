"""Stand-ins for the vendor services real agent CLIs talk to, on loopback only."""
