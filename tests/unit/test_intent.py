"""Intent recognition prompts A and B, the regression set, its runner (scripted here) and token counting."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from devtools.intent.cases import DEFAULT_CASES, load_cases
from devtools.intent.regression import (
    REPORT_TOOL_NAME,
    ScriptedIntentModel,
    build_request,
    main,
    parse_label,
    render_report,
    run_regression,
)
from devtools.intent.sizes import prompt_tokens
from shared import tokens
from shared.intent.prompts import A_TO_B, LABELS_A, LABELS_B, build_system_prompt
from shared.llm.types import ChatChunk, ChatRequest, ChatTurn, Finished, TextDelta
from shared.tools.clock import SPEC as CLOCK_SPEC

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2025, 1, 1, 9, 0, tzinfo=ZoneInfo("Asia/Shanghai"))


# ----------------------------------------------------------------------------------------------------------
# Prompts
# ----------------------------------------------------------------------------------------------------------


def test_variant_a_carries_the_router_labels_rules_and_priorities() -> None:
    prompt = build_system_prompt("A", [CLOCK_SPEC], NOW)
    for label in LABELS_A:
        assert f"- {label}:" in prompt
    assert "out_of_scope > memory_delete > memory_update > tool_use > clarify > task_query > chitchat" in prompt
    assert "## Decision rules" in prompt


def test_variant_b_has_the_short_label_set_and_explicit_priorities() -> None:
    prompt = build_system_prompt("B", [CLOCK_SPEC], NOW)
    for label in LABELS_B:
        assert f"- {label}:" in prompt
    assert "Priority: reject > memory_forget > memory_write > tool_call > chat." in prompt


def test_prompt_lists_the_tools_and_only_the_date_so_the_prefix_cache_survives_the_day() -> None:
    prompt = build_system_prompt("B", [CLOCK_SPEC], NOW)
    assert "- get_current_time: Current date and time" in prompt
    assert prompt.endswith("Today's date: 2025-01-01 (CST).")
    later = build_system_prompt("B", [CLOCK_SPEC], NOW.replace(hour=23, minute=59))
    assert later == prompt


def test_prompt_without_tools_says_so() -> None:
    assert "Tools you can call: none." in build_system_prompt("A", [], NOW)


def test_unknown_variant_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown intent variant 'C'"):
        build_system_prompt("C", [], NOW)  # type: ignore[arg-type]


def test_variant_b_is_much_shorter_than_a_in_qwen_tokens() -> None:
    assert prompt_tokens("B") * 2 < prompt_tokens("A")


def test_prompt_sizes_written_in_the_docs_are_current() -> None:
    # GIVEN the real Qwen tokenizer (dashscope is a test extra)
    assert tokens.tokenizer_name() == "qwen"
    doc = (REPO / "docs" / "policy.md").read_text(encoding="utf-8")
    # THEN the numbers in docs/policy.md are today's numbers (regenerate with python -m devtools.intent.sizes)
    for variant in ("A", "B"):
        match = re.search(rf"Variant {variant}: \*\*(\d+)\*\* Qwen tokens", doc)
        assert match, f"docs/policy.md must state the size of variant {variant}"
        assert int(match.group(1)) == prompt_tokens(variant)


# ----------------------------------------------------------------------------------------------------------
# The regression set
# ----------------------------------------------------------------------------------------------------------


def test_regression_set_has_enough_bilingual_reject_and_ambiguous_cases() -> None:
    cases = load_cases()
    assert len(cases) >= 40
    assert {c.lang for c in cases} == {"zh", "en"}
    assert sum(c.label == "reject" for c in cases) >= 5
    assert sum(c.ambiguous for c in cases) >= 8
    assert {c.label for c in cases} == set(LABELS_B)
    assert {c.label_a for c in cases} == set(LABELS_A)
    assert all(A_TO_B[c.label_a] == c.label for c in cases)


def test_a_bad_case_line_is_reported_with_its_line_number(tmp_path: Path) -> None:
    good = DEFAULT_CASES.read_text(encoding="utf-8").splitlines()[0]
    bad = json.dumps({"id": "x", "lang": "en", "text": "hi", "label": "chat", "label_a": "tool_use"})
    path = tmp_path / "cases.jsonl"
    path.write_text(good + "\n" + bad + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"(?s)cases.jsonl:2: .*folds into 'tool_call', not 'chat'"):
        load_cases(path)


# ----------------------------------------------------------------------------------------------------------
# The runner
# ----------------------------------------------------------------------------------------------------------


def test_request_is_the_worker_prompt_plus_history_and_the_report_tool() -> None:
    case = next(c for c in load_cases() if c.history)
    request = build_request(case, variant="A", model="m", tools=[CLOCK_SPEC], now=NOW)
    assert request.messages[0].content is not None
    assert request.messages[0].content.startswith(build_system_prompt("A", [CLOCK_SPEC], NOW))
    assert [m.role for m in request.messages[1:]] == ["user", "assistant", "user"]
    assert request.messages[-1].content == case.text
    assert [t.name for t in request.tools] == [REPORT_TOOL_NAME]
    assert request.tools[0].parameters["properties"]["label"]["enum"] == list(LABELS_A)
    assert request.thinking == "off"


def test_label_is_read_from_the_report_call_or_a_leading_intent_line() -> None:
    by_tool = ChatTurn(tool_calls={0: {"id": "c", "name": REPORT_TOOL_NAME, "arguments": '{"label": "reject"}'}})
    by_text = ChatTurn(text="Intent: tool_call\nsure, let me check")
    assert parse_label(by_tool) == "reject"
    assert parse_label(by_text) == "tool_call"
    assert parse_label(ChatTurn(text="Hello there")) is None
    assert parse_label(ChatTurn(tool_calls={0: {"id": "c", "name": REPORT_TOOL_NAME, "arguments": "{oops"}})) is None


class AlwaysChat:
    """A model that always answers in text with ``intent: chat`` and reports no usage."""

    provider = "fake"

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        yield TextDelta("intent: chat")
        yield Finished(reason="stop")

    async def list_models(self) -> list[str]:
        return ["fake"]


async def test_accuracy_per_label_counts_wrong_answers() -> None:
    # GIVEN a model that answers "chat" to everything
    cases = load_cases()
    results = await run_regression(AlwaysChat(), model_name="fake", variant="B", cases=cases, now=NOW)
    report = render_report(results, "B")
    # THEN chat cases are all right, the other labels all wrong, and tokens were counted locally
    n_chat = sum(c.label == "chat" for c in cases)
    assert re.search(rf"^chat\s+{n_chat}\s+{n_chat}\s+100.0%$", report, re.MULTILINE)
    n_reject = sum(c.label == "reject" for c in cases)
    assert re.search(rf"^reject\s+{n_reject}\s+0\s+0.0%$", report, re.MULTILINE)
    assert all(r.estimated_tokens and r.input_tokens > 0 for r in results)


async def test_a_failing_case_is_reported_without_hiding_the_others() -> None:
    class Broken(AlwaysChat):
        async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
            if "几点" in (request.messages[-1].content or ""):
                raise RuntimeError("endpoint down")
            async for chunk in super().stream(request):
                yield chunk

    results = await run_regression(Broken(), model_name="fake", variant="B", cases=load_cases(), now=NOW)
    report = render_report(results, "B")
    assert "error in tool-zh-01: RuntimeError: endpoint down" in report
    assert sum(r.error is not None for r in results) < len(results)


@pytest.mark.parametrize("variant", ["A", "B"])
def test_scripted_run_prints_the_table_per_label_and_tokens_per_case(
    variant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # WHEN the command runs against the scripted model (what CI does)
    code = main(["--scripted", "--variant", variant])
    out = capsys.readouterr().out
    # THEN it says what it proves, prints one row per case with tokens and one accuracy row per label
    assert code == 0
    assert "proves the harness, not a model" in out
    cases = load_cases()
    for case in cases:
        assert re.search(rf"^{re.escape(case.id)}\s+\S+\s+\S+\s+yes\s+~\s*\d+\s+\d+$", out, re.MULTILINE)
    for label in LABELS_A if variant == "A" else LABELS_B:
        assert re.search(rf"^{label}\s+\d+\s+\d+\s+100.0%$", out, re.MULTILINE)
    assert re.search(rf"^all\s+{len(cases)}\s+{len(cases)}\s+100.0%$", out, re.MULTILINE)
    assert ("folded to B" in out) is (variant == "A")


def test_scripted_model_answers_with_the_scripted_label() -> None:
    model = ScriptedIntentModel({"hi": "chat"})
    case = load_cases()[0].model_copy(update={"text": "hi"})
    request = build_request(case, variant="B", model="m", tools=[], now=NOW)

    async def first_label() -> str | None:
        from devtools.intent.regression import collect_turn

        return parse_label(await collect_turn(model.stream(request)))

    import asyncio

    assert asyncio.run(first_label()) == "chat"


def test_real_endpoint_mode_needs_url_and_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLM_BASE_URL", raising=False)
    monkeypatch.delenv("LLM_API_KEY", raising=False)
    assert main(["--variant", "B"]) == 2
    assert "--base-url (or LLM_BASE_URL) and --api-key (or LLM_API_KEY) are required" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------
# Token counting
# ----------------------------------------------------------------------------------------------------------


def test_count_tokens_uses_the_bundled_qwen_tokenizer() -> None:
    assert tokens.tokenizer_name() == "qwen"
    assert tokens.count_tokens("hello 你好 world") == 4


def test_count_tokens_falls_back_to_a_pessimistic_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_qwen_encoder", lambda: None)
    assert tokens.tokenizer_name() == "estimate"
    assert tokens.count_tokens("abcdef你好") == 2 + 2
    assert tokens.estimate_tokens("x" * 400) >= 100
