"""The memory evaluation set and its harness: the scripted run prints the metrics table (what CI runs)."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from devtools.memory_evaluation import load_cases, main


def test_the_case_set_covers_every_category_in_both_languages() -> None:
    cases = load_cases()
    assert len(cases) >= 60
    by = Counter((c.category, c.lang) for c in cases)
    for category in ("new_fact", "update", "retraction", "junk", "duplicate", "low_confidence", "memory_echo"):
        assert by[(category, "en")] >= 3 and by[(category, "zh")] >= 3, category
    notes = " ".join(c.note for c in cases)
    for junk in ("status text", "tool dump", "hypothetical", "third party", "assistant claim"):
        assert junk in notes, junk


def test_near_duplicate_cases_cover_paraphrase_language_change_and_difference_in_both_languages() -> None:
    cases = load_cases()
    by_kind = Counter(
        (kind, c.lang)
        for c in cases
        for kind in ("paraphrase", "cross-language", "changed fact", "similar but different")
        if c.note.startswith(kind)
    )
    assert sum(by_kind.values()) >= 12
    for kind in ("paraphrase", "cross-language", "changed fact", "similar but different"):
        assert by_kind[(kind, "en")] >= 1 and by_kind[(kind, "zh")] >= 1, kind


def test_scripted_evaluation_prints_its_metrics_table(capsys: pytest.CaptureFixture[str]) -> None:
    # WHEN the evaluation runs against the scripted model (recorded proposals, adversarial ones included)
    exit_code = main(["--scripted", "--json"])
    out = capsys.readouterr().out
    # THEN it prints every metric of the table, then the same numbers as JSON
    assert exit_code == 0
    for metric in (
        "write precision",
        "write recall",
        "junk-write rate",
        "duplicate rate",
        "wrong-forget rate",
        "tokens per extraction",
    ):
        assert re.search(rf"^{metric}\s+\d", out, re.M), metric
    assert "scripted model (recorded proposals replayed" in out
    metrics = json.loads(out.strip().splitlines()[-1])
    # AND the gate stopped every adversarial proposal it can judge: no duplicates, no wrong forgets, every
    # expected write kept, and junk at most 2 % (the correctly quoted hypothetical and third party's fact are
    # caught by reading the sentence around the quote)
    assert metrics["write_recall"] == 1.0
    assert metrics["duplicate_rate"] == 0.0 and metrics["wrong_forget_rate"] == 0.0
    assert metrics["junk_write_rate"] <= 0.02
    assert "en-junk-06" not in out and "zh-junk-08" not in out
    assert metrics["merged_duplicates"] >= 14
    assert metrics["merges"]["semantic_duplicate"] >= 8  # the paraphrase and cross-language cases merge by meaning
    assert metrics["write_precision"] == 1.0 and metrics["forget_recall"] == 1.0
    for reason in (
        "below_confidence_threshold",
        "evidence_not_from_user",
        "source_not_user_message",
        "evidence_from_memory_injection",
        "source_is_memory_injection",
        "not_a_memory_of_this_user",
        "evidence_not_found",
        "source_already_processed",
        "hypothetical_context",
        "third_party_context",
    ):
        assert metrics["rejections"].get(reason, 0) >= 1, reason
    assert metrics["tokens_per_extraction"] > 0 and metrics["tokens_estimated"] is True
    assert 0 < metrics["input_tokens_per_extraction"] < metrics["tokens_per_extraction"]
