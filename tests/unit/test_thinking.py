"""The thinking switch per provider and the incremental ``<think>`` stripper."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import ConfigurationError
from shared.llm.thinking import (
    ThinkStripper,
    detect_provider,
    parse_provider,
    strip_think,
    thinking_extra_body,
)


def run(chunks: list[str], *, starts_inside: bool = False) -> tuple[str, str]:
    stripper = ThinkStripper(starts_inside=starts_inside)
    visible: list[str] = []
    hidden: list[str] = []
    for chunk in chunks:
        shown, kept = stripper.feed(chunk)
        visible.append(shown)
        hidden.append(kept)
    shown, kept = stripper.flush()
    return "".join(visible) + shown, "".join(hidden) + kept


def every_split(text: str) -> list[list[str]]:
    """``text`` cut at every pair of positions: each tag gets split in every possible place."""
    return [[text[:i], text[i:j], text[j:]] for i in range(len(text) + 1) for j in range(i, len(text) + 1)]


# -- ThinkStripper -------------------------------------------------------------------------------------------

LEAK = "<think>first, the facts</think>\n\nThe answer is 42."


def test_a_block_is_hidden_wherever_the_chunks_are_cut() -> None:
    for chunks in every_split(LEAK):
        assert run(chunks) == ("The answer is 42.", "first, the facts"), chunks


def test_one_character_at_a_time() -> None:
    assert run(list(LEAK)) == ("The answer is 42.", "first, the facts")


def test_text_without_tags_passes_through_unchanged_and_unheld() -> None:
    stripper = ThinkStripper()
    assert stripper.feed("plain answer") == ("plain answer", "")
    assert stripper.flush() == ("", "")


def test_a_possible_tag_start_is_held_back_until_decided() -> None:
    # GIVEN text ending in what could be the start of a tag
    stripper = ThinkStripper()
    # WHEN it arrives, THEN the "<th" waits; when the next chunk shows it is no tag, it is released as text
    assert stripper.feed("a <th") == ("a ", "")
    assert stripper.feed("ing>") == ("<thing>", "")


def test_a_held_back_partial_tag_is_released_by_flush() -> None:
    stripper = ThinkStripper()
    assert stripper.feed("1 <") == ("1 ", "")
    assert stripper.flush() == ("<", "")


def test_an_unterminated_leading_block_stays_hidden() -> None:
    # GIVEN an answer cut off while still thinking
    for chunks in every_split("<think>still pondering"):
        # THEN nothing is shown and the thinking is handed back to be counted
        assert run(chunks) == ("", "still pondering"), chunks


def test_a_block_in_the_middle_is_removed_and_text_around_it_kept() -> None:
    assert run(["Before <think>x</think> after"]) == ("Before after", "x")


def test_several_blocks() -> None:
    assert run(["<think>a</think>one <think>b</think>two"]) == ("one two", "ab")


def test_a_block_opened_by_the_prompt_is_hidden_when_the_stripper_starts_inside() -> None:
    for chunks in every_split("reasoning</think>\n\nanswer"):
        assert run(chunks, starts_inside=True) == ("answer", "reasoning"), chunks


def test_a_stray_closing_tag_is_never_shown() -> None:
    visible, _ = run(["text</thi", "nk>more"])
    assert "</think>" not in visible
    assert visible == "textmore"


@given(st.text(alphabet="<>/thinkab \n", max_size=40), st.data())
def test_any_chunking_gives_the_same_result_as_the_whole_text(text: str, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    chunks = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert run(chunks) == run([text])


# -- strip_think ---------------------------------------------------------------------------------------------


def test_strip_think_splits_a_whole_text() -> None:
    assert strip_think(LEAK) == ("The answer is 42.", "first, the facts")


def test_strip_think_hides_text_before_an_orphan_closing_tag() -> None:
    # GIVEN a whole answer whose opening tag was in the prompt
    assert strip_think("the model reasons</think>\n\nHello") == ("Hello", "the model reasons")


def test_strip_think_keeps_text_without_tags() -> None:
    assert strip_think("just text") == ("just text", "")


# -- the thinking switch -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        ("dashscope", {"enable_thinking": False}),
        ("vllm", {"chat_template_kwargs": {"enable_thinking": False}}),
        ("sglang", {"chat_template_kwargs": {"enable_thinking": False}}),
        ("openai-compatible", {"enable_thinking": False, "chat_template_kwargs": {"enable_thinking": False}}),
    ],
)
def test_thinking_off_is_explicit_for_every_provider(provider: str, expected: dict[str, object]) -> None:
    assert thinking_extra_body(parse_provider(provider), enabled=False) == expected


def test_thinking_on_flips_the_same_keys() -> None:
    assert thinking_extra_body("openai-compatible", enabled=True) == {
        "enable_thinking": True,
        "chat_template_kwargs": {"enable_thinking": True},
    }


@pytest.mark.parametrize(
    ("base_url", "provider"),
    [
        ("https://dashscope.aliyuncs.com/compatible-mode/v1", "dashscope"),
        ("https://dashscope-intl.aliyuncs.com/compatible-mode/v1", "dashscope"),
        ("http://127.0.0.1:8000/v1", "openai-compatible"),
        ("https://dashscope.example.com/v1", "openai-compatible"),
        ("https://api.example.com/dashscope.aliyuncs.com/v1", "openai-compatible"),
    ],
)
def test_provider_is_detected_from_the_host(base_url: str, provider: str) -> None:
    assert detect_provider(base_url) == provider


def test_an_unknown_provider_label_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        parse_provider("bedrock")
