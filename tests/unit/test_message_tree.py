"""The thread as a tree, as pure functions (shared/message_tree.py): linking, walking one branch, siblings."""

from __future__ import annotations

from shared.message_tree import (
    BranchWalk,
    branch_of,
    link_messages,
    newest_leaf_under,
    on_branch,
    sibling_ids,
)
from shared.models import PREVIOUS, Message, Role, ToolCall


def m(mid: str, seq: int, parent: str | None = PREVIOUS, role: Role = Role.USER, **extra: object) -> Message:
    return Message(id=mid, thread_id="t", role=role, content=mid, seq=seq, parent_id=parent, **extra)  # type: ignore[arg-type]


# u1 -> a1 -> u2 -> a2, then u2b (edit of u2) -> a2b, then a1x (regenerate of u1... as a sibling of a1)
TREE = [
    m("u1", 1, None),
    m("a1", 2, "u1", Role.ASSISTANT),
    m("u2", 3, "a1"),
    m("a2", 4, "u2", Role.ASSISTANT),
    m("u2b", 5, "a1"),
    m("a2b", 6, "u2b", Role.ASSISTANT),
    m("a1x", 7, "u1", Role.ASSISTANT),
]


def test_new_messages_follow_the_leaf_and_each_other_and_an_edit_keeps_its_parent() -> None:
    linked = link_messages([m("x", 0), m("y", 0), m("e", 0, "a1")], leaf_id="a2b", last_seq=6)
    assert [(x.id, x.parent_id) for x in linked] == [("x", "a2b"), ("y", "x"), ("e", "a1")]
    assert link_messages([m("first", 0)], leaf_id=None, last_seq=0)[0].parent_id is None
    # a thread stored before trees (no leaf, messages): the link stays "the message stored before"
    assert link_messages([m("late", 0)], leaf_id=None, last_seq=5)[0].parent_id == PREVIOUS


def test_a_branch_is_walked_newest_first_skipping_the_others() -> None:
    assert [x.id for x in branch_of(TREE, "a2b")] == ["u1", "a1", "u2b", "a2b"]
    assert [x.id for x in branch_of(TREE, "a2")] == ["u1", "a1", "u2", "a2"]
    assert [x.id for x in branch_of(TREE, None)] == ["u1", "a1x"]  # the newest message's branch
    assert branch_of(TREE, "nope") == []
    walk = BranchWalk("a2")
    assert [walk.take(x) for x in reversed(TREE)] == [False, False, False, True, True, True, True]
    assert walk.complete


def test_messages_stored_before_trees_read_as_one_branch() -> None:
    legacy = [m("u1", 1), m("a1", 2, role=Role.ASSISTANT), m("u2", 3)]
    assert [x.id for x in branch_of(legacy, None)] == ["u1", "a1", "u2"]
    assert sibling_ids(legacy) == {}


def test_siblings_and_the_newest_leaf_under_a_message() -> None:
    assert sibling_ids(TREE) == {
        "a1": ("a1", "a1x"),
        "a1x": ("a1", "a1x"),
        "u2": ("u2", "u2b"),
        "u2b": ("u2", "u2b"),
    }
    assert newest_leaf_under(TREE, "a1") == "a2b"
    assert newest_leaf_under(TREE, "u2") == "a2"
    assert newest_leaf_under(TREE, "nope") is None


def test_admission_reconciles_only_the_current_branchs_pending_calls() -> None:
    # GIVEN a newer branch that ended with a front-end call left pending, and the user back on the older branch
    call = ToolCall(id="c1", name="confirm_booking")
    newest_first = [m("b-call", 4, "u1", Role.ASSISTANT, tool_calls=(call,)), *reversed(TREE[:3])]
    # THEN the branch admission reconciles with holds no pending call
    assert [x.id for x in on_branch(newest_first, "u2")] == ["u2", "a1", "u1"]
    assert [x.id for x in on_branch(newest_first, None)] == ["b-call", "u1"]
