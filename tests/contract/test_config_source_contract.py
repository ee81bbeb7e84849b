"""Contract of the ``ConfigSource`` port: the same cases on the in-memory fake and on the AppConfig extension adapter,
which reads a stand-in of the extension's HTTP API on loopback (``devtools/local/appconfig_standin.py``; the real
extension runs only inside Lambda). Then the adapter alone: what it does when the extension is not there, is slow,
or does not know the names it was given."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from devtools.local.appconfig_standin import ExtensionStandIn
from shared.adapters.appconfig_extension import AppConfigExtensionSource
from shared.adapters.in_memory.config import InMemoryConfigSource
from shared.errors import RuntimeConfigUnavailable
from shared.ports.config import ConfigSource

NAMES = ("agent-app", "prod env", "runtime")
"""Application, environment and profile; a space in one of them proves the path is quoted."""


@dataclass
class Backend:
    source: ConfigSource
    deployments: InMemoryConfigSource
    """Where the test deploys: the fake itself, or the document the stand-in extension serves."""


@pytest.fixture(params=["fake", "extension"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    deployments = InMemoryConfigSource()
    if request.param == "fake":
        yield Backend(deployments, deployments)
        return
    app, env, profile = NAMES
    standin = ExtensionStandIn(deployments, application=app, environment=env, profile=profile).start()
    try:
        yield Backend(AppConfigExtensionSource(app, env, profile, base_url=standin.url, timeout_s=2), deployments)
    finally:
        standin.stop()


def test_the_deployed_document_comes_back_with_its_version(backend: Backend) -> None:
    version = backend.deployments.deploy('{"rollout": {}}')
    document = backend.source.fetch()
    assert (document.version, document.content) == (version, b'{"rollout": {}}')


def test_a_new_deployment_comes_back_with_a_new_version(backend: Backend) -> None:
    first = backend.deployments.deploy("{}")
    second = backend.deployments.deploy('{"window_n_override": 25}')
    document = backend.source.fetch()
    assert first != second == document.version
    assert document.content == b'{"window_n_override": 25}'


def test_nothing_deployed_is_unavailable(backend: Backend) -> None:
    with pytest.raises(RuntimeConfigUnavailable) as caught:
        backend.source.fetch()
    assert caught.value.code == "runtime_config_unavailable"
    assert caught.value.details["status"] == 404


# ----------------------------------------------------------------------------------------------------------
# The adapter alone
# ----------------------------------------------------------------------------------------------------------


def test_no_extension_listening_is_unavailable_not_an_error_of_the_run() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    source = AppConfigExtensionSource(*NAMES, base_url=f"http://127.0.0.1:{port}", timeout_s=1)
    with pytest.raises(RuntimeConfigUnavailable, match="did not answer"):
        source.fetch()


def test_an_extension_that_does_not_answer_in_time_is_unavailable() -> None:
    # GIVEN a listener that accepts the connection and never answers
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        source = AppConfigExtensionSource(*NAMES, base_url=f"http://127.0.0.1:{port}", timeout_s=0.2)
        # THEN the read gives up after its timeout
        with pytest.raises(RuntimeConfigUnavailable) as caught:
            source.fetch()
    assert caught.value.details == {"reason": "TimeoutError"}


def test_names_the_extension_does_not_know_are_unavailable() -> None:
    standin = ExtensionStandIn(InMemoryConfigSource("{}"), application="agent-app").start()
    try:
        source = AppConfigExtensionSource("another-app", "local", "runtime", base_url=standin.url)
        with pytest.raises(RuntimeConfigUnavailable) as caught:
            source.fetch()
    finally:
        standin.stop()
    assert caught.value.details["status"] == 404


def test_a_proxy_in_the_environment_is_never_asked_for_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    standin = ExtensionStandIn(InMemoryConfigSource("{}"), application="agent-app").start()
    try:
        document = AppConfigExtensionSource("agent-app", "local", "runtime", base_url=standin.url).fetch()
    finally:
        standin.stop()
    assert document.content == b"{}"
