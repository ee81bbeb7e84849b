"""How a mistake in profile configuration is reported: one :class:`ProfileProblem` per mistake (where, which field,
what is wrong, how to fix it), all of them in one :class:`~shared.errors.ConfigurationError`.

Shared by the profile files (``shared.profiles``), the roll-out rules (``shared.rollouts``) and the runtime
configuration document (``shared.runtime_config``), so a problem reads the same wherever it was found.
"""

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

from shared.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class ProfileProblem:
    """One mistake in a profile file: where, which field, what is wrong and how to fix it."""

    source: str
    field: str
    problem: str
    fix: str

    def render(self) -> str:
        return f"{self.source}: field '{self.field}': {self.problem}. Fix: {self.fix}"


def fail(problems: list[ProfileProblem]) -> NoReturn:
    """Raise one ``ConfigurationError`` (code ``invalid_profile``) listing every problem."""
    raise ConfigurationError(
        "invalid execution profile configuration:\n" + "\n".join(p.render() for p in problems),
        code="invalid_profile",
        details=[dataclasses.asdict(p) for p in problems],
    )


def raise_if_any(problems: list[ProfileProblem]) -> None:
    if problems:
        fail(problems)


def loc(parts: Iterable[int | str]) -> str:
    """A pydantic error location as a dotted path: ``tool_policy.allowlist[1]``."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(document)"
