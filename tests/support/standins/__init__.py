"""Local stand-ins for the vendor APIs the real agent CLIs call, for the tests."""
