"""Shared state per thread (AG-UI ``RunAgentInput.state``, ``STATE_SNAPSHOT``, ``STATE_DELTA``).

- ``models``: the stored state and its version.
- ``limits``: how large and how deep a state may be (a client's and a patched one alike).
- ``json_patch``: RFC 6902 JSON Patch, applied to a copy (a failed patch changes nothing).
- ``tool``: the worker's built-in ``update_state`` tool, whose argument is ``{"patch": [operations]}``.

docs/protocols/agent/run-agent-input.md "state" says what a client sends and what wins.
"""
