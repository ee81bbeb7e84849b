"""RFC 6902 JSON Patch (``shared.thread_state.json_patch``): the RFC's own examples, and patches that must fail
without changing anything."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.thread_state.json_patch import PatchError, apply_patch, json_equal, parse_pointer

# (document, patch, expected) from RFC 6902 appendix A.
RFC_EXAMPLES: list[tuple[Any, list[dict[str, Any]], Any]] = [
    ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
    ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}], {"foo": ["bar", "qux", "baz"]}),
    ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
    ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
    ({"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}], {"baz": "boo", "foo": "bar"}),
    (
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
    ),
    (
        {"foo": ["all", "grass", "cows", "eat"]},
        [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
        {"foo": ["all", "cows", "eat", "grass"]},
    ),
    (
        {"baz": "qux", "foo": ["a", 2, "c"]},
        [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
        {"baz": "qux", "foo": ["a", 2, "c"]},
    ),
    (
        {"foo": "bar"},
        [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
        {"foo": "bar", "child": {"grandchild": {}}},
    ),
    ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}], {"foo": ["bar", ["abc", "def"]]}),
    ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
    ({"a": 1}, [{"op": "copy", "from": "/a", "path": "/b"}], {"a": 1, "b": 1}),
    ({"a": 1}, [{"op": "replace", "path": "", "value": {"z": 0}}], {"z": 0}),
]


@pytest.mark.parametrize(("document", "patch", "expected"), RFC_EXAMPLES)
def test_the_rfc_examples_apply_and_the_document_itself_is_left_as_it_was(
    document: Any, patch: list[dict[str, Any]], expected: Any
) -> None:
    before = copy.deepcopy(document)
    assert apply_patch(document, patch) == expected
    assert document == before


@pytest.mark.parametrize(
    ("patch", "why"),
    [
        ([{"op": "add", "path": "/baz/bat", "value": "qux"}], "does not exist"),  # RFC A.12: a missing parent
        ([{"op": "test", "path": "/foo", "value": "baz"}], "test failed"),  # RFC A.9
        ([{"op": "remove", "path": "/nothing"}], "does not exist"),
        ([{"op": "replace", "path": "/list/5", "value": 1}], "out of range"),
        ([{"op": "add", "path": "/list/01", "value": 1}], "not an array index"),
        ([{"op": "add", "path": "baz", "value": 1}], "start with '/'"),
        ([{"op": "add", "path": "/a~2b", "value": 1}], "'~'"),
        ([{"op": "move", "from": "/obj", "path": "/obj/child"}], "its own children"),
        ([{"op": "add", "path": "/x"}], "needs a value"),
        ([{"op": "frobnicate", "path": "/x"}], "unknown operation"),
        ([{"op": "add", "path": "/baz/x", "value": 1}], "does not exist"),
    ],
)
def test_a_patch_that_cannot_apply_is_refused_with_the_failing_operation_named(
    patch: list[dict[str, Any]], why: str
) -> None:
    document = {"foo": "bar", "list": [1, 2], "obj": {"k": 1}}
    with pytest.raises(PatchError, match=why) as raised:
        apply_patch(document, patch)
    assert "operation 0" in str(raised.value)


def test_a_failure_late_in_a_patch_leaves_the_earlier_operations_unapplied() -> None:
    document = {"steps": [{"status": "pending"}]}
    patch = [
        {"op": "replace", "path": "/steps/0/status", "value": "done"},
        {"op": "test", "path": "/steps/0/status", "value": "pending"},
    ]
    with pytest.raises(PatchError, match="operation 1"):
        apply_patch(document, patch)
    assert document == {"steps": [{"status": "pending"}]}


def test_test_compares_as_json_does() -> None:
    assert json_equal(1, 1.0) and json_equal({"a": [1, {"b": 2}]}, {"a": [1.0, {"b": 2}]})
    assert not json_equal(True, 1) and not json_equal(0, False) and not json_equal("1", 1)
    assert not json_equal([1, 2], [2, 1])


def test_pointers_unescape_tilde_and_slash() -> None:
    assert parse_pointer("") == []
    assert parse_pointer("/a~1b/~0c/") == ["a/b", "~c", ""]
