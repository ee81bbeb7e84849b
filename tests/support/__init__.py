"""Helpers shared by the test suites (real AG-UI clients, SSE parsing)."""
