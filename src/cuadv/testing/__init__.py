"""Shared by tests, labs and smoke runs: test data, references and exact checks of the mechanisms (never
imported by the library itself)."""
