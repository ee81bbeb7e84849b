"""The labelled intent regression set: one JSON object per line, each labelled for both prompt variants."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from shared.intent.prompts import A_TO_B, LABELS_A, LABELS_B, IntentVariant

DEFAULT_CASES = Path(__file__).resolve().parents[2] / "eval" / "intent" / "cases.jsonl"
"""The set kept in the repository (a tooling file: it does not ship with the Lambda code)."""


class HistoryTurn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["user", "assistant"]
    content: str


class IntentCase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    lang: Literal["zh", "en"]
    text: str = Field(min_length=1)
    label: str
    """The variant B label."""
    label_a: str
    """The variant A (router) label; must fold into ``label``."""
    ambiguous: bool = False
    note: str = ""
    history: tuple[HistoryTurn, ...] = ()

    @model_validator(mode="after")
    def _labels_agree(self) -> IntentCase:
        if self.label not in LABELS_B:
            raise ValueError(f"label {self.label!r} is not one of {LABELS_B}")
        if self.label_a not in LABELS_A:
            raise ValueError(f"label_a {self.label_a!r} is not one of {LABELS_A}")
        if A_TO_B[self.label_a] != self.label:
            raise ValueError(
                f"label_a {self.label_a!r} folds into {A_TO_B[self.label_a]!r}, not {self.label!r}"
            )
        return self

    def expected(self, variant: IntentVariant) -> str:
        return self.label_a if variant == "A" else self.label


def load_cases(path: Path = DEFAULT_CASES) -> list[IntentCase]:
    """Read and validate the set; a bad line is reported with its line number."""
    cases: list[IntentCase] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            case = IntentCase.model_validate(json.loads(line))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise ValueError(f"{path.name}:{number}: {exc}") from exc
        if case.id in seen:
            raise ValueError(f"{path.name}:{number}: duplicate case id {case.id!r}")
        seen.add(case.id)
        cases.append(case)
    return cases
