"""A stand-in for the AWS AppConfig Lambda extension's HTTP API, on loopback, for tests and ``make dev``.

The real extension runs only inside Lambda, so the adapter (``shared/adapters/appconfig_extension.py``) is tested
against this: ``GET /applications/{app}/environments/{env}/configurations/{profile}`` answers 200 with the deployed
document and its version in ``Configuration-Version``; any other path 404 (as the extension answers a name it does
not know); a source that has nothing deployed answers the status it reports (404), or 503.

Run it beside ``make dev`` to try runtime configuration locally (docs/policy.md §1.5); the file is read on every
request, so saving it deploys it::

    python -m devtools.local.appconfig_standin --file runtime-config.json
    APPCONFIG_APPLICATION=agent APPCONFIG_ENVIRONMENT=local APPCONFIG_PROFILE=runtime \\
        APPCONFIG_EXTENSION_URL=http://127.0.0.1:2772 RUNTIME_CONFIG_POLL_S=2 make dev
"""

from __future__ import annotations

import argparse
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

from shared.errors import RuntimeConfigUnavailable
from shared.ports.config import ConfigDocument, ConfigSource


class FileSource:
    """A configuration kept in a file: its content as saved now, its version counting the changes seen."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._last: bytes | None = None
        self._version = 0

    def fetch(self) -> ConfigDocument:
        try:
            content = self._path.read_bytes()
        except FileNotFoundError as exc:
            raise RuntimeConfigUnavailable(f"{self._path} does not exist", details={"status": 404}) from exc
        if content != self._last:
            self._last, self._version = content, self._version + 1
        return ConfigDocument(str(self._version), content)


class ExtensionStandIn:
    """Serves ``source``'s document at the extension's path for one application, environment and profile."""

    def __init__(
        self,
        source: ConfigSource,
        *,
        application: str = "agent",
        environment: str = "local",
        profile: str = "runtime",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.source = source
        self.names = (application, environment, profile)
        app, env, config = (quote(name, safe="") for name in self.names)
        self.path = f"/applications/{app}/environments/{env}/configurations/{config}"
        self.requests = 0
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ExtensionStandIn:
        self._thread = threading.Thread(target=self._server.serve_forever, name="appconfig-standin", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on this thread until interrupted (the command line)."""
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def answer(self, path: str) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body the extension would answer for ``path``."""
        self.requests += 1
        if path.split("?", 1)[0] != self.path:
            return 404, {"Content-Type": "text/plain"}, b"no such application, environment or configuration"
        try:
            document = self.source.fetch()
        except RuntimeConfigUnavailable as exc:
            status = exc.details.get("status", 503) if isinstance(exc.details, dict) else 503
            return int(status), {"Content-Type": "text/plain"}, exc.message.encode()
        headers = {"Content-Type": "application/json", "Configuration-Version": document.version}
        return 200, headers, document.content


def _handler(standin: ExtensionStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, headers, body = standin.answer(self.path)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # quiet: tests read their own output
            return

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, required=True, help="the configuration document (JSON)")
    parser.add_argument("--port", type=int, default=2772)
    parser.add_argument("--application", default="agent")
    parser.add_argument("--environment", default="local")
    parser.add_argument("--profile", default="runtime")
    args = parser.parse_args(argv)
    standin = ExtensionStandIn(
        FileSource(args.file),
        application=args.application,
        environment=args.environment,
        profile=args.profile,
        port=args.port,
    )
    print(f"Serving {args.file} at {standin.url}{standin.path}", flush=True)
    try:
        standin.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
