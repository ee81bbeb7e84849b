"""Outgoing URLs (webhook targets): HTTPS only, and no loopback, private, link-local, multicast, reserved or
metadata address after resolving; loopback only with the make-dev setting."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from shared.url_safety import UnsafeUrl, check_url


def resolving_to(*addresses: str):  # type: ignore[no-untyped-def]
    async def resolver(host: str, port: int) -> Sequence[str]:
        return addresses

    return resolver


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.9",
        "192.168.1.1",
        "169.254.169.254",
        "169.254.1.1",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "::1",
        "fd00:ec2::254",
        "fe80::1",
        "fc00::1",
        "::ffff:10.0.0.1",
    ],
)
async def test_a_name_resolving_to_an_inside_address_is_refused(address: str) -> None:
    with pytest.raises(UnsafeUrl) as refused:
        await check_url("https://hooks.example.com/x", allow_loopback=False, resolver=resolving_to(address))
    assert refused.value.code == "unsafe_url"


async def test_one_inside_address_among_public_ones_is_enough_to_refuse() -> None:
    with pytest.raises(UnsafeUrl, match="private"):
        await check_url(
            "https://hooks.example.com/x", allow_loopback=False, resolver=resolving_to("93.184.216.34", "10.0.0.5")
        )


async def test_a_public_https_target_is_accepted() -> None:
    addresses = await check_url(
        "https://hooks.example.com:8443/x?t=1", allow_loopback=False, resolver=resolving_to("93.184.216.34")
    )
    assert addresses == ["93.184.216.34"]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://hooks.example.com/x", "only https"),
        ("ftp://hooks.example.com/x", "only https"),
        ("https://user:pw@hooks.example.com/x", "credentials"),
        ("https:///x", "no host"),
        ("https://[::1]/x", "loopback"),
        ("https://169.254.169.254/latest/meta-data", "metadata"),
        ("http://127.0.0.1:9/x", "only https"),
    ],
)
async def test_a_bad_url_is_refused_before_any_lookup(url: str, reason: str) -> None:
    async def no_lookup(host: str, port: int) -> Sequence[str]:
        raise AssertionError("resolved a URL that should have been refused first")

    with pytest.raises(UnsafeUrl, match=reason):
        await check_url(url, allow_loopback=False, resolver=no_lookup)


async def test_the_dev_setting_allows_loopback_and_only_loopback() -> None:
    assert await check_url("http://127.0.0.1:9/x", allow_loopback=True) == ["127.0.0.1"]
    with pytest.raises(UnsafeUrl, match="only https"):
        await check_url("http://hooks.example.com/x", allow_loopback=True, resolver=resolving_to("127.0.0.1"))
    with pytest.raises(UnsafeUrl, match="private"):
        await check_url("https://hooks.example.com/x", allow_loopback=True, resolver=resolving_to("10.0.0.1"))


async def test_a_name_that_does_not_resolve_is_refused() -> None:
    async def fails(host: str, port: int) -> Sequence[str]:
        raise OSError("no such host")

    with pytest.raises(UnsafeUrl, match="does not resolve"):
        await check_url("https://nowhere.invalid/x", allow_loopback=False, resolver=fails)


def test_the_loopback_setting_is_refused_inside_lambda() -> None:
    from shared.errors import ConfigurationError
    from shared.settings import Settings

    assert Settings.from_env({"WEBHOOK_ALLOW_LOOPBACK": "true"}).webhook_allow_loopback is True
    with pytest.raises(ConfigurationError, match="WEBHOOK_ALLOW_LOOPBACK"):
        Settings.from_env({"WEBHOOK_ALLOW_LOOPBACK": "true", "AWS_LAMBDA_FUNCTION_NAME": "agent-webhook"})


def test_the_template_can_never_set_the_loopback_setting() -> None:
    from pathlib import Path

    template = (Path(__file__).resolve().parents[2] / "template.yaml").read_text()
    # Not as a variable, not as a parameter that could feed one.
    assert "WEBHOOK_ALLOW_LOOPBACK" not in template.upper()
    assert "ALLOWLOOPBACK" not in template.upper().replace("_", "")
