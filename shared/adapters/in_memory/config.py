"""The in-memory fake of the runtime configuration port (``shared.ports.config``): a document a test deploys."""

from __future__ import annotations

import json
import threading
from typing import Any

from shared.errors import RuntimeConfigUnavailable
from shared.ports.config import ConfigDocument


class InMemoryConfigSource:
    """Serves the last document :meth:`deploy` was given, under a version that counts deployments; after
    :meth:`go_down`, every fetch raises until the next :meth:`deploy`. Thread-safe (a stand-in server reads it from
    its own threads)."""

    def __init__(self, document: str | bytes | dict[str, Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._document: ConfigDocument | None = None
        self._deployments = 0
        self.fetches = 0
        if document is not None:
            self.deploy(document)

    def deploy(self, document: str | bytes | dict[str, Any]) -> str:
        """Make ``document`` (JSON text, bytes, or an object to encode) the deployed configuration; its version."""
        if isinstance(document, dict):
            content = json.dumps(document).encode()
        else:
            content = document.encode() if isinstance(document, str) else document
        with self._lock:
            self._deployments += 1
            self._document = ConfigDocument(str(self._deployments), content)
            return self._document.version

    def go_down(self) -> None:
        with self._lock:
            self._document = None

    def fetch(self) -> ConfigDocument:
        with self._lock:
            self.fetches += 1
            if self._document is None:
                raise RuntimeConfigUnavailable("no configuration is deployed", details={"status": 404})
            return self._document
