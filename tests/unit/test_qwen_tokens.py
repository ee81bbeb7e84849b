"""Token counts mean Qwen tokens: the shipped vocabulary read with tiktoken, the estimate only as a logged fallback."""

from __future__ import annotations

import logging

import pytest

from shared.models import Message, Role
from shared.tokens import QWEN_VOCAB, count_tokens, counter_for, estimate_tokens, message_counter_for, tokenizer_name

MIXED = (
    "用户说：我下周三要去上海出差，帮我看看 Hangzhou 到 Shanghai 的高铁 G7512 几点发车？"
    "Also remind me to bring my laptop charger."
)


def test_the_qwen_vocabulary_is_package_data() -> None:
    assert QWEN_VOCAB.is_file() and QWEN_VOCAB.stat().st_size > 2_000_000
    assert tokenizer_name() == "qwen"


def test_the_count_of_a_fixed_mixed_chinese_english_text_is_pinned() -> None:
    # 39 Qwen tokens (the dashscope SDK's tokenizer agrees); the estimate says 51
    assert count_tokens(MIXED) == 39
    assert estimate_tokens(MIXED) == 51


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 1),
        ("abc", 1),
        ("abcd", 2),
        ("Hello, world!", 5),  # 13 ASCII characters: 3 per token, rounded up
        ("你好", 2),
        ("你好, world", 2 + 3),  # one per non-ASCII character plus the 7 ASCII ones
        ("é", 1),
    ],
)
def test_the_estimate_counts_three_ascii_characters_or_one_other_character_per_token(text: str, expected: int) -> None:
    # The one estimate of the code base (the counting fallback and the usage of a server that reports none): pessimistic
    # against Qwen's about 4 ASCII and 1.3-1.5 CJK characters per token, so a cap counted with it holds.
    assert estimate_tokens(text) == expected


def test_the_count_agrees_with_the_dashscope_tokenizer() -> None:
    dashscope = pytest.importorskip("dashscope")
    reference = dashscope.get_tokenizer("qwen-turbo")
    for text in (MIXED, "Hello, world!", "你好，世界", "def f(x):\n    return x * 2\n", "<|im_start|> as text"):
        expected = len(reference.encode(text, allowed_special=set(), disallowed_special=()))
        assert count_tokens(text) == expected, text


def test_qwen_models_count_with_the_tokenizer_and_others_with_a_logged_estimate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert counter_for("qwen3.5-30b-a3b") is count_tokens
    assert counter_for("Qwen/Qwen3-30B-A3B-Instruct") is count_tokens
    with caplog.at_level(logging.WARNING, logger="shared.tokens"):
        counter = counter_for("some-other-model")
    assert counter is estimate_tokens
    assert any("estimate" in r.getMessage() and getattr(r, "model", "") == "some-other-model" for r in caplog.records)
    message = Message(id="m", thread_id="t", role=Role.USER, content=MIXED)
    assert message_counter_for("qwen-plus")(message) == 39 + 4


def test_a_text_counted_again_is_not_encoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run of a profile counts the same system prompt and tool schemas: the count is remembered."""
    from shared import tokens

    encoded: list[str] = []
    real = tokens._qwen_encoder

    def spying() -> object:
        encode = real()
        assert encode is not None

        def spy(text: str) -> list[int]:
            encoded.append(text)
            return encode(text)

        return spy

    monkeypatch.setattr(tokens, "_qwen_encoder", spying)
    text = MIXED + " (counted twice in this test only)"
    # WHEN the same text is counted three times
    counts = [count_tokens(text) for _ in range(3)]
    # THEN the counts agree and the text went through the tokenizer once
    assert len(set(counts)) == 1 and counts[0] > count_tokens(MIXED)
    assert encoded.count(text) == 1
