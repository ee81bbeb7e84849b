"""``SERVED_TENANTS`` (shared/tenancy.py): parsed once when the settings load, ``*`` by default; a wrong value stops
the function at start-up, naming the variable."""

from __future__ import annotations

import pytest

from shared.errors import ConfigurationError, NotFound
from shared.settings import Settings
from shared.tenancy import ServedTenants
from shared.wiring.settings import ApiSettings, AutomationFunctionSettings, MemoryFunctionSettings, load_settings


def test_every_tenant_is_served_by_default() -> None:
    served = ServedTenants(Settings.from_env({}).served_tenants)
    assert served.everyone and served.serves("any-tenant")


@pytest.mark.parametrize("model", [ApiSettings, MemoryFunctionSettings, AutomationFunctionSettings])
def test_a_comma_list_serves_exactly_those_tenants_in_each_function_that_checks(model: type[ApiSettings]) -> None:
    # GIVEN SERVED_TENANTS as the template passes it to every function
    loaded = load_settings(model, {"SERVED_TENANTS": " tenant-a, tenant-b ,"})
    served = ServedTenants(loaded.settings.served_tenants)
    # THEN those two and no other
    assert (served.serves("tenant-a"), served.serves("tenant-b"), served.serves("tenant-c")) == (True, True, False)
    with pytest.raises(NotFound) as refused:
        served.check("tenant-c")
    assert (refused.value.code, str(refused.value)) == ("tenant_not_served", "this tenant is not served here")
    served.check("tenant-a")


@pytest.mark.parametrize("value", ["*, tenant-a", ",", " , "])
def test_a_wrong_list_stops_the_function_at_start_up(value: str) -> None:
    # GIVEN every tenant beside named ones, or a list of no tenant (a typo, never "serve no one")
    # THEN the settings do not load, and the error names the variable
    with pytest.raises(ConfigurationError, match="SERVED_TENANTS"):
        load_settings(ApiSettings, {"SERVED_TENANTS": value})
