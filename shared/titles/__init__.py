"""Automatic thread titles: after a thread's first exchange, a short title in the user's language (docs/memory.md,
"Thread titles"), written by the memory function off the run path."""
