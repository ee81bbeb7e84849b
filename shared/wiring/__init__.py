"""The composition root: the one package that assembles adapters and services from settings.

Everything is built lazily (nothing connects at import time) and once per :class:`Services` instance, as a typed
``cached_property``. Tests and the local runner replace a port through :class:`ServiceOverrides`, one typed field
per injectable port: a misspelt name is a type error (and a ``TypeError`` at run time), never a silent fallback
to real AWS. No domain module imports this package or an adapter (an import-linter contract in pyproject.toml).

One module per group of providers, each a mixin of :class:`Services` that builds on the groups it needs:

- ``base``: the settings, the overrides and the process's one DynamoDB client;
- ``overrides``: :class:`ServiceOverrides` and :func:`~shared.wiring.overrides.overridable`, the one override check;
- ``stores``: the main table's adapters (threads, runs, audit, thread state, memories, markers, tasks, usage);
- ``streams``: the event stream and the "run completed" publisher;
- ``models``: the chat model, its id map, the embedder;
- ``catalog``: tools, MCP servers, runtime configuration and the profiles checked against them;
- ``runs``: the run service, the worker, limits, chat and threads, token verification;
- ``memory``: the memory executor and extraction; ``automation``: tasks, their schedules, erasure;
- ``migrations``: the migration runner and function invoker;
- ``secrets``: the secrets read at start-up (the model key, MCP auth headers), kept apart from the building;
- ``warm_up``: building and connecting ahead of the first invocation, behind one small protocol;
- ``services``: :class:`Services`, all of the above in one object.
"""

from shared.wiring.overrides import MainTable, ServiceOverrides
from shared.wiring.services import Services
from shared.wiring.warm_up import LambdaFunction

__all__ = ["LambdaFunction", "MainTable", "ServiceOverrides", "Services"]
