"""Which of a run's messages the thread has, from admission's newest page and the client's order
(shared/runs/known_ids.py): the cases the page can place and the one it cannot."""

from __future__ import annotations

from shared.models import Message, Role
from shared.runs.known_ids import sort_by_page


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
