"""``units_convert``: converts a quantity between units of length, mass or temperature.

The example of a plugin tool: a strict argument schema (the runner refuses anything else before the handler runs),
a short timeout and a small output cap. Switch it on with ``TOOL_PLUGINS=tool_plugins.units_convert:TOOL`` and allow
it in a profile's ``tool_policy.allowlist``.
"""

from __future__ import annotations

import json
from typing import Any

from shared.llm.types import ToolSpec
from shared.tools.registry import ServerTool, ToolContext, ToolFailed

# Factors to the base unit of each dimension (metre, kilogram).
_LINEAR: dict[str, tuple[str, float]] = {
    "mm": ("length", 0.001),
    "cm": ("length", 0.01),
    "m": ("length", 1.0),
    "km": ("length", 1000.0),
    "in": ("length", 0.0254),
    "ft": ("length", 0.3048),
    "mi": ("length", 1609.344),
    "g": ("mass", 0.001),
    "kg": ("mass", 1.0),
    "lb": ("mass", 0.45359237),
    "oz": ("mass", 0.028349523125),
}
_TEMPERATURE = ("C", "F", "K")
UNITS = tuple(_LINEAR) + _TEMPERATURE

SPEC = ToolSpec(
    name="units_convert",
    description="Convert a quantity between units of length (mm, cm, m, km, in, ft, mi), mass (g, kg, lb, oz) "
    "or temperature (C, F, K).",
    parameters={
        "type": "object",
        "properties": {
            "value": {"type": "number", "minimum": -1e12, "maximum": 1e12},
            "from_unit": {"type": "string", "enum": list(UNITS)},
            "to_unit": {"type": "string", "enum": list(UNITS)},
        },
        "required": ["value", "from_unit", "to_unit"],
        "additionalProperties": False,
    },
)


def _to_kelvin(value: float, unit: str) -> float:
    return {"C": value + 273.15, "F": (value - 32) * 5 / 9 + 273.15, "K": value}[unit]


def _from_kelvin(value: float, unit: str) -> float:
    return {"C": value - 273.15, "F": (value - 273.15) * 9 / 5 + 32, "K": value}[unit]


def convert(value: float, from_unit: str, to_unit: str) -> float:
    if from_unit in _TEMPERATURE or to_unit in _TEMPERATURE:
        if not (from_unit in _TEMPERATURE and to_unit in _TEMPERATURE):
            raise ToolFailed(f"cannot convert {from_unit} to {to_unit}: different kinds of quantity")
        return _from_kelvin(_to_kelvin(value, from_unit), to_unit)
    (kind_from, factor_from), (kind_to, factor_to) = _LINEAR[from_unit], _LINEAR[to_unit]
    if kind_from != kind_to:
        raise ToolFailed(f"cannot convert {from_unit} ({kind_from}) to {to_unit} ({kind_to})")
    return value * factor_from / factor_to


async def _handler(arguments: dict[str, Any], _ctx: ToolContext) -> str:
    value, from_unit, to_unit = float(arguments["value"]), arguments["from_unit"], arguments["to_unit"]
    result = convert(value, from_unit, to_unit)
    return json.dumps({"value": value, "from_unit": from_unit, "to_unit": to_unit, "result": round(result, 6)})


TOOL = ServerTool(spec=SPEC, handler=_handler, timeout_s=2.0, max_output_chars=500)
