"""The runtime configuration port: where the document that adds profiles and changes roll-outs is read from
(``shared.runtime_config``).

Unlike the other ports this one is synchronous. It is read at most once per poll interval, from inside the call
that chooses a run's profile (a sync method with five callers, two of them sync themselves), and the deployed
adapter reads a local cache: the AppConfig Lambda extension on localhost, about a millisecond. Making it async
would make every one of those callers await for a read that almost never happens.

- fake: ``InMemoryConfigSource`` (``shared/adapters/in_memory/config.py``), a document the test deploys;
- adapter: ``AppConfigExtensionSource`` (``shared/adapters/appconfig_extension.py``), the extension's HTTP API;
- contract suite: ``tests/contract/test_config_source_contract.py`` (the adapter against a stand-in of the
  extension, ``devtools/local/appconfig_standin.py``: the real extension runs only inside Lambda).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol


class ConfigDocument(NamedTuple):
    """The configuration as deployed: its version label (AppConfig's ``Configuration-Version``) and its bytes."""

    version: str
    content: bytes


class ConfigSource(Protocol):
    def fetch(self) -> ConfigDocument:
        """The configuration deployed now.

        Raises:
            RuntimeConfigUnavailable: it cannot be read (nothing deployed yet, the source down or too slow).
        """
        ...
