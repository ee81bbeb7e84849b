"""Server tools that live outside ``shared/`` and are switched on by the ``TOOL_PLUGINS`` setting.

Each module exposes a :class:`shared.tools.registry.ServerTool` (or a list, or a factory returning either); list it
as ``tool_plugins.<module>:<attribute>`` in ``TOOL_PLUGINS``. See docs/policy.md "Adding a server tool".
"""
