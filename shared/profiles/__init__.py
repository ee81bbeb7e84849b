"""Execution profiles (docs/design.md §7.1): which executor, which model, what history and which tools a run
gets.

Profiles are versioned JSON files in ``shared/profiles_data/`` (inside the package, so they ship with the
Lambda code). :func:`load_catalog` reads and validates all of them at start-up; every mistake becomes a
:class:`~shared.errors.ConfigurationError` that names the file, the field and the fix, so a bad profile stops
the deploy instead of the first user message. Roll-out and rollback (docs/design.md §11) are applied by
:meth:`ProfileCatalog.choose`. The same switches, and profiles added without a release, can also come from the
runtime configuration (``shared.runtime_config``), which builds its catalogs with :func:`parse_profiles` and
:func:`build_catalog`.

The package, by concern:

- ``schema``: the profile's pydantic models;
- ``catalog``: the validated profiles and the roll-out switches applied when a run asks for one;
- ``checks``: what a well-formed profile is checked against (models, tools, MCP servers);
- ``fixes``: the fix an author is told for each schema error;
- ``loading``: reading files or documents, parsing, checking, and building the catalog.

What is known about each model id lives with the models (``shared.llm.model_traits``); every public name is
importable from here.
"""

from shared.llm.model_traits import KNOWN_MODELS, ModelTraits
from shared.profiles.catalog import ProfileCatalog, ProfileChoice, Profiles
from shared.profiles.checks import ProfileChecks
from shared.profiles.loading import (
    PROFILES_DIR,
    build_catalog,
    default_catalog,
    default_known_tools,
    load_catalog,
    parse_profiles,
)
from shared.profiles.schema import (
    FRONTEND_PATTERN,
    MEMORY_TOOL_NAMES,
    ExecutionProfile,
    HistoryPolicy,
    MemoryPolicy,
    ModelConfig,
    MultitaskStrategy,
    RunPolicy,
    ToolPolicy,
)

__all__ = [
    "FRONTEND_PATTERN",
    "KNOWN_MODELS",
    "MEMORY_TOOL_NAMES",
    "PROFILES_DIR",
    "ExecutionProfile",
    "HistoryPolicy",
    "MemoryPolicy",
    "ModelConfig",
    "ModelTraits",
    "MultitaskStrategy",
    "ProfileCatalog",
    "ProfileChecks",
    "ProfileChoice",
    "Profiles",
    "RunPolicy",
    "ToolPolicy",
    "build_catalog",
    "default_catalog",
    "default_known_tools",
    "load_catalog",
    "parse_profiles",
]
