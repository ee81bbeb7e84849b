"""The runtime configuration read through the AWS AppConfig Lambda extension (``shared.ports.config``).

The extension is a Lambda layer that runs beside the function: it holds the AppConfig session, polls AppConfig at
its own interval (``AWS_APPCONFIG_EXTENSION_POLL_INTERVAL_SECONDS``), caches the latest configuration, and serves
it on ``http://localhost:2772/applications/{app}/environments/{env}/configurations/{profile}`` with its version
in the ``Configuration-Version`` header. Why the extension rather than calling the ``appconfigdata`` API from this
process: docs/deployment.md, "Runtime configuration".

Only the standard library is used: one GET on the loopback interface, never through a proxy.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from urllib.parse import quote

from shared.errors import RuntimeConfigUnavailable
from shared.ports.config import ConfigDocument

DEFAULT_URL = "http://localhost:2772"
MAX_BYTES = 2 * 1024 * 1024
"""A hosted AppConfig configuration is at most 2 MB; anything longer is not one."""

# The extension listens on loopback: a proxy from the environment (HTTP_PROXY) must never be asked for it.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class AppConfigExtensionSource:
    def __init__(
        self, application: str, environment: str, profile: str, *, base_url: str = DEFAULT_URL, timeout_s: float = 1.0
    ) -> None:
        path = "/".join(
            (
                "applications",
                quote(application, safe=""),
                "environments",
                quote(environment, safe=""),
                "configurations",
                quote(profile, safe=""),
            )
        )
        self.url = f"{base_url.rstrip('/')}/{path}"
        self._timeout_s = timeout_s

    def fetch(self) -> ConfigDocument:
        """The configuration the extension holds; an error status, no answer or a timeout is unavailable."""
        request = urllib.request.Request(self.url, headers={"Accept": "application/json"})
        try:
            with _OPENER.open(request, timeout=self._timeout_s) as response:
                content = response.read(MAX_BYTES + 1)
                version = response.headers.get("Configuration-Version", "")
        except urllib.error.HTTPError as exc:
            reason = exc.read(500).decode("utf-8", "replace")
            raise RuntimeConfigUnavailable(
                f"the AppConfig extension answered {exc.code}", details={"status": exc.code, "reason": reason}
            ) from exc
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out, cut short
            raise RuntimeConfigUnavailable(
                "the AppConfig extension did not answer", details={"reason": type(exc).__name__}
            ) from exc
        if len(content) > MAX_BYTES:
            raise RuntimeConfigUnavailable("the configuration is larger than 2 MB", details={"version": version})
        return ConfigDocument(version, content)
