"""Junk the gate can see: each rule rejects its junk and lets its counter-example through."""

from __future__ import annotations

import pytest

from shared.memory.junk_rules import judge


@pytest.mark.parametrize(
    ("text", "quote"),
    [
        ("Hypothetically, if I moved to Japan, what visa would I need?", "if I moved to Japan"),
        ("If I were a millionaire, I'd buy a boat in Monaco.", "I'd buy a boat in Monaco"),
        ("Suppose I lived in Oslo, would I need a car?", "I lived in Oslo"),
        ("Imagine I'm a vegan chef for a day.", "I'm a vegan chef"),
        ("假如我是老板，我会给大家放长假。", "我会给大家放长假"),
        ("如果我去留学的话，你觉得英国还是美国好？", "如果我去留学的话"),
        ("要是我搬到成都，应该住哪个区？", "我搬到成都"),
    ],
)
def test_hypotheticals_are_rejected(text: str, quote: str) -> None:
    finding = judge(text, quote)
    assert finding is not None and finding.reason == "hypothetical_context"


@pytest.mark.parametrize(
    ("text", "quote"),
    [
        ("If I remember right, I'm allergic to nuts.", "I'm allergic to nuts"),
        ("If I recall correctly, I was born in Porto.", "I was born in Porto"),
        ("I'm allergic to nuts, so if I order food, please check it.", "I'm allergic to nuts"),
        ("如果我没记错的话，我对青霉素过敏。", "我对青霉素过敏"),
        ("我是护士。如果有空我再来问你。", "我是护士"),
    ],
)
def test_memory_hedges_and_later_conditionals_are_not_hypotheticals(text: str, quote: str) -> None:
    assert judge(text, quote) is None


@pytest.mark.parametrize(
    ("text", "quote"),
    [
        ("Am I allergic to penicillin?", "allergic to penicillin"),
        ("Should I move to Berlin next year?", "move to Berlin next year"),
        ("Do I like jazz more than rock, what do you think?", "I like jazz more than rock"),
        ("我是不是对青霉素过敏？", "对青霉素过敏"),
        ("我适合学钢琴吗？", "我适合学钢琴"),
        ("Moving to Berlin next year?", "Moving to Berlin next year"),
    ],
)
def test_questions_are_rejected(text: str, quote: str) -> None:
    finding = judge(text, quote)
    assert finding is not None and finding.reason == "question_context"


@pytest.mark.parametrize(
    ("text", "quote"),
    [
        ("My daughter Lily just turned 5, any party ideas?", "My daughter Lily just turned 5"),
        ("As a vegetarian, what can I eat in Rome?", "As a vegetarian"),
        ("Can you always answer me in bullet points?", "always answer me in bullet points"),
        ("Any tips since I'm vegetarian?", "I'm vegetarian"),
        ("我住杭州西湖区，周末去哪玩？", "我住杭州西湖区"),
    ],
)
def test_facts_next_to_a_question_and_requests_are_still_written(text: str, quote: str) -> None:
    assert judge(text, quote) is None


@pytest.mark.parametrize(
    ("text", "quote"),
    [
        ("My colleague Tom is obsessed with golf, he talks about it all day.", "obsessed with golf"),
        ("My best friend plays the violin in an orchestra.", "plays the violin in an orchestra"),
        ("She works as a lawyer in Boston.", "works as a lawyer in Boston"),
        ("我朋友最近在学钢琴，你觉得难吗？", "最近在学钢琴"),
        ("我同事小王特别喜欢打羽毛球。", "特别喜欢打羽毛球"),
    ],
)
def test_third_party_facts_are_rejected(text: str, quote: str) -> None:
    finding = judge(text, quote)
    assert finding is not None and finding.reason == "third_party_context"


@pytest.mark.parametrize(
    ("text", "quote"),
    [
        ("My daughter Lily just turned 5.", "My daughter Lily just turned 5"),
        ("My wife and I moved to Lyon last year.", "My wife and I moved to Lyon"),
        ("我女儿今年五岁了。", "我女儿今年五岁"),
        ("我和朋友合租在上海。", "我和朋友合租在上海"),
        ("I work with my colleague Tom on the payroll team.", "I work with my colleague Tom on the payroll team"),
    ],
)
def test_the_users_own_family_and_facts_that_mention_others_are_still_written(text: str, quote: str) -> None:
    assert judge(text, quote) is None


def test_a_quote_not_in_the_text_is_not_judged() -> None:
    assert judge("I like tea.", "I like coffee") is None
