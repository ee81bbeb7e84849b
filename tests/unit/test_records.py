"""Records are frozen, slotted dataclasses: equal only to a record of the same type, never to a tuple or to a
record of another type with the same fields (as ``NamedTuple`` records were), and changed with
``dataclasses.replace``."""

from __future__ import annotations

import dataclasses

import pytest

from shared.llm.types import ChatMessage, ChatRequest, Finished, ReasoningDelta, TextDelta
from shared.profile_problems import ProfileProblem


def test_a_text_delta_is_not_a_reasoning_delta_with_the_same_text() -> None:
    assert TextDelta("a") != ReasoningDelta("a")
    assert TextDelta("a") == TextDelta("a")


def test_a_record_is_not_equal_to_the_tuple_of_its_fields() -> None:
    assert TextDelta("a") != ("a",)
    assert Finished("stop") != ("stop", None)
    assert ChatMessage("user", "hi") != ("user", "hi", (), None)


def test_records_are_frozen_and_slotted_and_changed_by_replace() -> None:
    request = ChatRequest(model="m", messages=(ChatMessage("user", "hi"),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.model = "other"  # type: ignore[misc]
    assert not hasattr(request, "__dict__")
    changed = dataclasses.replace(request, model="other")
    assert (changed.model, changed.messages, request.model) == ("other", request.messages, "m")


def test_a_profile_problem_is_reported_as_a_mapping_of_its_fields() -> None:
    problem = ProfileProblem("a.json", "model.name", "unknown", "fix it")
    assert dataclasses.asdict(problem) == {
        "source": "a.json",
        "field": "model.name",
        "problem": "unknown",
        "fix": "fix it",
    }
