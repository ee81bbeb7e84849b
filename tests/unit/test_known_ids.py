"""Which of a run's messages the thread has, from admission's newest page and the client's order
(shared/runs/known_ids.py): the cases the page can place and the one it cannot."""

from __future__ import annotations

from shared.models import Message, Role
from shared.runs.known_ids import needs_reading, sort_by_page, user_digest


def m(mid: str, seq: int = 0) -> Message:
    return Message(id=mid, thread_id="th", role=Role.USER, content=mid, seq=seq)


def page(first: int, last: int) -> list[Message]:
    """Stored messages ``m{first}`` .. ``m{last}``, newest first, as ``read_back`` returns them."""
    return [m(f"m{i}", i) for i in range(last, first - 1, -1)]


def test_a_page_that_holds_the_whole_thread_places_every_id() -> None:
    # the page asked for 50 and got 3: the thread has nothing else
    fresh, check = sort_by_page([m("m2"), m("m3"), m("new")], page(1, 3), read_limit=50)
    assert ([x.id for x in fresh], check) == (["new"], [])


def test_ids_before_the_first_held_one_are_older_than_the_page_and_those_after_are_new() -> None:
    fresh, check = sort_by_page([m("m5"), m("m12"), m("m13"), m("new")], page(11, 13), read_limit=3)
    assert ([x.id for x in fresh], check) == (["new"], [])


def test_ids_the_page_cannot_place_are_checked() -> None:
    fresh, check = sort_by_page([m("m5"), m("new"), m("new")], page(11, 13), read_limit=3)
    assert (fresh, check) == ([], ["m5", "new"])


def test_messages_placed_by_order_are_read_unless_the_kept_digest_vouches_for_them() -> None:
    sent = [m("m5"), Message(id="a6", thread_id="th", role=Role.ASSISTANT, content="x"), m("m12"), m("new")]
    recent = page(11, 13)
    fresh, _ = sort_by_page(sent, recent, read_limit=3)
    stored_part = [x for x in sent if x.id != "new"]
    # the thread kept the digest of exactly these user messages: nothing to read
    assert needs_reading(sent, recent, fresh, user_digest(stored_part)) == []
    # no digest kept, or another: the user message placed by order (not the assistant one, not the page's) is read
    assert needs_reading(sent, recent, fresh, None) == ["m5"]
    assert needs_reading(sent, recent, fresh, user_digest([m("m12")])) == ["m5"]


def test_the_digest_covers_ids_and_texts_in_order_and_only_user_messages() -> None:
    one, two = m("m1"), m("m2")
    edited = one.model_copy(update={"content": "m1, edited"})
    assistant = Message(id="a1", thread_id="th", role=Role.ASSISTANT, content="anything")
    assert user_digest([one, two]) == user_digest([one, assistant, two])
    assert len({user_digest([one, two]), user_digest([two, one]), user_digest([edited, two])}) == 3
