"""Helpers shared by several test suites (receivers, workers, fixtures)."""
