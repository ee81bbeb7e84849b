"""Behaviour shared by every Lambda function of the agent backend.

Models, ports (``shared.ports``), adapters (``shared.adapters``), the executors, the context window, tool
authorisation and the wiring that assembles them. ``functions/*`` only adapt an entry point to this package.
"""
