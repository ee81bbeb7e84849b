"""Contract of the threads-and-messages port (``ThreadStore``, shared/ports/threads.py): the same cases against
``InMemoryThreads`` and ``DynamoDBThreads`` (moto): threads, messages, claims, the takeover, admission, erasure.

A case the DynamoDB adapter does not meet yet is marked ``xfail(strict=True)`` for that backend only, with the
reason, so the fake keeps the intended behaviour and the mark fails loudly once the adapter is fixed. Cases that
need another aggregate (a run to admit, a thread to audit) reach it through the same table's store.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from shared.adapters.aws import dynamo_codec
from shared.adapters.aws.dynamodb_store import DynamoDBStore
from shared.adapters.in_memory.store import InMemoryStore
from shared.errors import InvalidRequest, NotFound
from shared.executors.approvals import APPROVAL_FLAG, ApprovalRequest, open_requests, requests_on_record
from shared.models import (
    ExecutionMeta,
    ExecutorKind,
    Identity,
    Message,
    Origin,
    Role,
    RunStatus,
    ToolCall,
    utc_now,
)
from tests.support.table_stores import (
    ALICE,
    ALICE_ELSEWHERE,
    BOB,
    a_run,
    audit,
    msg,
    table_store_fixture,  # noqa: F401  (the `store` fixture)
)

Store = InMemoryStore | DynamoDBStore


async def all_thread_ids(store: Store, identity: Identity, page: int) -> tuple[list[str], list[int]]:
    """Walk every page of ``list_threads``; returns the ids in order and the size of each page."""
    ids: list[str] = []
    sizes: list[int] = []
    cursor: str | None = None
    for _ in range(20):
        threads, cursor = await store.threads.list_threads(identity, limit=page, cursor=cursor)
        ids.extend(t.thread_id for t in threads)
        sizes.append(len(threads))
        if cursor is None:
            return ids, sizes
    raise AssertionError("list_threads never ran out of pages")


# ---- threads -----------------------------------------------------------------------------------------------


async def test_thread_is_created_on_first_open_and_owned_by_the_caller(store: Store) -> None:
    # GIVEN no thread  WHEN alice opens one
    opened = await store.threads.open_thread(ALICE, "t1")
    # THEN it is hers, empty and idle, and get_thread finds the same thread
    assert (opened.tenant_id, opened.thread_id, opened.owner_user_id) == ("tenant-a", "t1", "alice")
    assert (opened.last_seq, opened.active_run_id) == (0, None)
    fetched = await store.threads.get_thread(ALICE, "t1")
    assert (fetched.thread_id, fetched.owner_user_id, fetched.created_at) == ("t1", "alice", opened.created_at)


async def test_opening_an_existing_thread_returns_it_unchanged(store: Store) -> None:
    # GIVEN alice's thread with a message
    first = await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg("m1")])
    # WHEN she opens it again
    again = await store.threads.open_thread(ALICE, "t1")
    # THEN it is the same thread, not a fresh one
    assert (again.created_at, again.last_seq) == (first.created_at, 1)


async def test_another_user_opening_or_getting_the_thread_gets_not_found(store: Store) -> None:
    # GIVEN alice's thread
    await store.threads.open_thread(ALICE, "t1")
    # WHEN bob (same tenant) opens or gets it  THEN NotFound, never the thread
    with pytest.raises(NotFound):
        await store.threads.open_thread(BOB, "t1")
    with pytest.raises(NotFound):
        await store.threads.get_thread(BOB, "t1")
    # AND alice still owns it
    assert (await store.threads.get_thread(ALICE, "t1")).owner_user_id == "alice"


async def test_another_tenant_getting_the_thread_gets_not_found(store: Store) -> None:
    # GIVEN alice's thread in tenant-a
    await store.threads.open_thread(ALICE, "t1")
    # WHEN the same user id in tenant-b gets it  THEN NotFound
    with pytest.raises(NotFound):
        await store.threads.get_thread(ALICE_ELSEWHERE, "t1")


async def test_the_same_thread_id_in_another_tenant_is_a_separate_empty_thread(store: Store) -> None:
    # GIVEN alice's thread t1 in tenant-a with a message
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg("m1", content="tenant-a secret")])
    # WHEN tenant-b opens a thread with the same id
    other = await store.threads.open_thread(ALICE_ELSEWHERE, "t1")
    # THEN it is tenant-b's own empty thread, and nothing of tenant-a's is readable through it
    assert (other.tenant_id, other.last_seq) == ("tenant-b", 0)
    assert await store.threads.read_back("tenant-b", "t1", before_seq=None, limit=10) == []
    assert await store.threads.known_message_ids("tenant-b", "t1", ["m1"]) == set()
    assert [m.content for m in await store.threads.read_back("tenant-a", "t1", before_seq=None, limit=10)] == [
        "tenant-a secret"
    ]


async def test_list_threads_shows_only_the_callers_threads(store: Store) -> None:
    # GIVEN threads of alice, of bob and of alice's namesake in another tenant
    for thread_id in ("a1", "a2"):
        await store.threads.open_thread(ALICE, thread_id)
    await store.threads.open_thread(BOB, "b1")
    await store.threads.open_thread(ALICE_ELSEWHERE, "x1")
    # WHEN alice lists her threads
    ids, _ = await all_thread_ids(store, ALICE, page=10)
    # THEN she sees exactly hers
    assert sorted(ids) == ["a1", "a2"]


async def test_list_threads_paginates_newest_updated_first_with_a_cursor(store: Store) -> None:
    # GIVEN five threads opened in order, then a run on the second one (claim, a message, release: a turn's end
    # is the thread's update, its one move in the listing a turn)
    for n in range(1, 6):
        await store.threads.open_thread(ALICE, f"t{n}")
    await asyncio.sleep(0.002)  # the release must land on a later timestamp than the last open
    assert await store.threads.claim_thread(ALICE, "t2", "r1", stale_before=utc_now() - timedelta(minutes=15))
    await store.threads.append_messages(ALICE, "t2", [msg("m1", thread_id="t2")])
    await store.threads.release_thread("tenant-a", "t2", "r1")
    # WHEN alice walks the listing two at a time
    ids, sizes = await all_thread_ids(store, ALICE, page=2)
    # THEN the pages are full, and together list every thread once, most recently updated first
    assert ids == ["t2", "t5", "t4", "t3", "t1"]
    assert sizes[:3] == [2, 2, 1]


async def test_list_threads_rejects_a_cursor_from_another_user(store: Store) -> None:
    # GIVEN a cursor from alice's listing
    for n in range(3):
        await store.threads.open_thread(ALICE, f"t{n}")
    _, cursor = await store.threads.list_threads(ALICE, limit=1, cursor=None)
    assert cursor is not None
    # WHEN bob, or alice's namesake in another tenant, uses it  THEN InvalidRequest (invalid_cursor)
    for intruder in (BOB, ALICE_ELSEWHERE):
        with pytest.raises(InvalidRequest) as excinfo:
            await store.threads.list_threads(intruder, limit=1, cursor=cursor)
        assert excinfo.value.code == "invalid_cursor"


async def test_list_threads_rejects_a_malformed_cursor(store: Store) -> None:
    # GIVEN garbage where a cursor belongs  WHEN listing  THEN InvalidRequest (invalid_cursor)
    for garbage in ("%%%", "bm90IGpzb24=", "WzEsIDJd"):  # not base64 / not JSON / JSON but not an object
        with pytest.raises(InvalidRequest) as excinfo:
            await store.threads.list_threads(ALICE, limit=1, cursor=garbage)
        assert excinfo.value.code == "invalid_cursor"


async def test_listing_follows_updated_at_after_a_run_releases_a_thread(store: Store) -> None:
    # GIVEN t1 then t2 opened
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.open_thread(ALICE, "t2")
    await asyncio.sleep(0.002)
    # WHEN a run on t1 claims and then releases it (which moves t1's updated_at past t2's)
    assert await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=utc_now() - timedelta(minutes=15))
    await store.threads.release_thread("tenant-a", "t1", "r1")
    # THEN the listing is still ordered by the updated_at it shows
    threads, _ = await store.threads.list_threads(ALICE, limit=10, cursor=None)
    assert [t.thread_id for t in threads] == ["t1", "t2"]
    assert threads[0].updated_at >= threads[1].updated_at


# ---- messages ----------------------------------------------------------------------------------------------


async def test_append_assigns_consecutive_seq(store: Store) -> None:
    # GIVEN an empty thread
    await store.threads.open_thread(ALICE, "t1")
    # WHEN two batches are appended
    first = await store.threads.append_messages(ALICE, "t1", [msg("m1"), msg("m2")])
    second = await store.threads.append_messages(ALICE, "t1", [msg("m3")])
    # THEN seqs run 1, 2, 3 in append order, and the thread's counter follows
    assert [(m.id, m.seq) for m in first + second] == [("m1", 1), ("m2", 2), ("m3", 3)]
    assert (await store.threads.get_thread(ALICE, "t1")).last_seq == 3
    stored = await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=10)
    assert [(m.id, m.seq) for m in stored] == [("m1", 1), ("m2", 2), ("m3", 3)]


async def test_reappending_the_same_ids_stores_nothing(store: Store) -> None:
    # GIVEN two stored messages
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg("m1"), msg("m2")])
    # WHEN the same ids are appended again (a client retry)
    again = await store.threads.append_messages(ALICE, "t1", [msg("m1", content="retry"), msg("m2", content="retry")])
    # THEN nothing new is stored and nothing is returned
    assert again == []
    stored = await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=10)
    assert [(m.id, m.content) for m in stored] == [("m1", "text m1"), ("m2", "text m2")]
    assert (await store.threads.get_thread(ALICE, "t1")).last_seq == 2


async def test_a_batch_mixing_known_and_new_ids_stores_only_the_new_in_order(store: Store) -> None:
    # GIVEN m1 and m2 stored
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg("m1"), msg("m2")])
    # WHEN a batch interleaves them with new ids
    stored_now = await store.threads.append_messages(ALICE, "t1", [msg("m1"), msg("m3"), msg("m2"), msg("m4")])
    # THEN only m3 and m4 are stored, in batch order, right after the existing messages
    assert [(m.id, m.seq) for m in stored_now] == [("m3", 3), ("m4", 4)]
    stored = await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=10)
    assert [m.id for m in stored] == ["m1", "m2", "m3", "m4"]


async def test_known_message_ids_reports_only_ids_stored_in_that_thread(store: Store) -> None:
    # GIVEN m1 stored in alice's t1
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg("m1")])
    # WHEN asking about m1 and an unknown id, in that thread and elsewhere
    # THEN only m1 in t1 is known
    assert await store.threads.known_message_ids("tenant-a", "t1", ["m1", "nope", "m1"]) == {"m1"}
    assert await store.threads.known_message_ids("tenant-a", "t2", ["m1"]) == set()
    assert await store.threads.known_message_ids("tenant-b", "t1", ["m1"]) == set()


async def test_stored_messages_returns_the_bodies_of_the_ids_stored_in_that_thread(store: Store) -> None:
    # GIVEN 150 messages stored in alice's t1 (more than one batch read)
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg(f"m{i}", content=f"text {i}") for i in range(1, 151)])
    # WHEN asking for some of them, an unknown id and a repeated one
    found = await store.threads.stored_messages(
        "tenant-a", "t1", ["m2", "nope", "m2", *[f"m{i}" for i in range(40, 151)]]
    )
    # THEN each stored one comes back once, with its text and number; nothing of another thread or tenant
    assert sorted((m.id, m.content, m.seq) for m in found) == sorted(
        [("m2", "text 2", 2)] + [(f"m{i}", f"text {i}", i) for i in range(40, 151)]
    )
    assert await store.threads.stored_messages("tenant-a", "t2", ["m1"]) == []
    assert await store.threads.stored_messages("tenant-b", "t1", ["m1"]) == []


async def test_appending_to_someone_elses_thread_is_not_found(store: Store) -> None:
    # GIVEN alice's thread  WHEN bob appends to it  THEN NotFound and nothing is stored
    await store.threads.open_thread(ALICE, "t1")
    with pytest.raises(NotFound):
        await store.threads.append_messages(BOB, "t1", [msg("m1")])
    assert await store.threads.read_back("tenant-a", "t1", before_seq=None, limit=10) == []


async def test_appending_a_message_that_names_another_thread_is_refused(store: Store) -> None:
    # GIVEN bob's thread with one message, and alice's own thread
    await store.threads.open_thread(BOB, "bobs")
    await store.threads.append_messages(BOB, "bobs", [msg("b1", thread_id="bobs", content="bob's words")])
    await store.threads.open_thread(ALICE, "t1")
    # WHEN alice appends to her thread a message that names bob's thread
    with pytest.raises(InvalidRequest):
        await store.threads.append_messages(ALICE, "t1", [msg("a1", thread_id="bobs", content="alice's words")])
    # THEN bob's thread is untouched
    bobs = await store.threads.read_back("tenant-a", "bobs", before_seq=None, limit=10)
    assert [m.content for m in bobs] == ["bob's words"]


async def test_concurrent_appends_never_lose_or_duplicate_a_message(store: Store) -> None:
    # GIVEN one thread and two writers: one appending single messages, one appending pairs
    await store.threads.open_thread(ALICE, "t1")
    singles = [msg(f"s{n}") for n in range(6)]
    pairs = [[msg(f"p{n}a"), msg(f"p{n}b")] for n in range(3)]

    async def write_singles() -> None:
        for m in singles:
            await store.threads.append_messages(ALICE, "t1", [m])

    async def write_pairs() -> None:
        for pair in pairs:
            await store.threads.append_messages(ALICE, "t1", pair)

    # WHEN both write at the same time
    await asyncio.gather(write_singles(), write_pairs())
    # THEN every message is stored exactly once, seqs are 1..12 without gaps, and each writer's order holds
    stored = await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=100)
    ids = [m.id for m in stored]
    assert sorted(ids) == sorted([m.id for m in singles] + [m.id for pair in pairs for m in pair])
    assert [m.seq for m in stored] == list(range(1, 13))
    assert [i for i in ids if i.startswith("s")] == [m.id for m in singles]
    assert [i for i in ids if i.startswith("p")] == [m.id for pair in pairs for m in pair]
    assert (await store.threads.get_thread(ALICE, "t1")).last_seq == 12


async def test_sustained_concurrent_appends_do_not_give_up(store: Store) -> None:
    # GIVEN two writers, each appending twenty messages one by one to the same thread
    await store.threads.open_thread(ALICE, "t1")

    async def writer(prefix: str) -> None:
        for n in range(20):
            await store.threads.append_messages(ALICE, "t1", [msg(f"{prefix}{n}")])

    # WHEN they write at the same time
    await asyncio.gather(writer("x"), writer("y"))
    # THEN all forty are stored with gapless seqs
    stored = await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=100)
    assert [m.seq for m in stored] == list(range(1, 41))
    assert len({m.id for m in stored}) == 40


async def test_read_back_pages_newest_first_with_before_seq(store: Store) -> None:
    # GIVEN five messages
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg(f"m{n}") for n in range(1, 6)])
    # WHEN paging back two at a time  THEN newest first, each page strictly before the given seq
    assert [m.seq for m in await store.threads.read_back("tenant-a", "t1", before_seq=None, limit=2)] == [5, 4]
    assert [m.seq for m in await store.threads.read_back("tenant-a", "t1", before_seq=4, limit=2)] == [3, 2]
    assert [m.seq for m in await store.threads.read_back("tenant-a", "t1", before_seq=2, limit=2)] == [1]
    assert await store.threads.read_back("tenant-a", "t1", before_seq=1, limit=2) == []


async def test_read_forward_pages_oldest_first_with_after_seq(store: Store) -> None:
    # GIVEN five messages
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg(f"m{n}") for n in range(1, 6)])
    # WHEN paging forward two at a time  THEN oldest first, each page strictly after the given seq
    assert [m.seq for m in await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=2)] == [1, 2]
    assert [m.seq for m in await store.threads.read_forward("tenant-a", "t1", after_seq=2, limit=2)] == [3, 4]
    assert [m.seq for m in await store.threads.read_forward("tenant-a", "t1", after_seq=4, limit=2)] == [5]
    assert await store.threads.read_forward("tenant-a", "t1", after_seq=5, limit=2) == []


async def test_run_message_ids_are_the_runs_own_messages_after_its_first_one_in_thread_order(store: Store) -> None:
    # GIVEN a thread where run r0 stored m1, run r1 then stored m2..m4 with a message of run r2 (a salvage)
    # between them, and r2 stored m6 after them; r1 was admitted when the thread's counter was 1
    await store.threads.open_thread(ALICE, "t1")
    runs = ["r0", "r1", "r2", "r1", "r1", "r2"]
    messages = [msg(f"m{n}").model_copy(update={"run_id": run}) for n, run in enumerate(runs, start=1)]
    await store.threads.append_messages(ALICE, "t1", messages)
    # WHEN looking for r1's messages from its first one
    found = await store.threads.run_message_ids("tenant-a", "t1", "r1", after_seq=1, scan_limit=100)
    # THEN its three messages, in thread order, and the look-up reached the end of the thread
    assert (found.ids, found.complete) == (("m2", "m4", "m5"), True)
    # AND a run of another tenant with the same ids finds nothing, nor does an unknown thread
    assert (await store.threads.run_message_ids("tenant-b", "t1", "r1", after_seq=0, scan_limit=100)).ids == ()
    assert (await store.threads.run_message_ids("tenant-a", "t404", "r1", after_seq=0, scan_limit=100)).ids == ()


async def test_run_message_ids_stop_at_their_bound_and_say_so(store: Store) -> None:
    # GIVEN six messages of run r1
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(
        ALICE, "t1", [msg(f"m{n}").model_copy(update={"run_id": "r1"}) for n in range(1, 7)]
    )
    # WHEN at most four are read  THEN the first four, marked incomplete; with room for all, complete
    bounded = await store.threads.run_message_ids("tenant-a", "t1", "r1", after_seq=0, scan_limit=4)
    assert (bounded.ids, bounded.complete) == (("m1", "m2", "m3", "m4"), False)
    whole = await store.threads.run_message_ids("tenant-a", "t1", "r1", after_seq=2, scan_limit=10)
    assert (whole.ids, whole.complete) == (("m3", "m4", "m5", "m6"), True)


async def test_reading_a_page_of_history_is_one_store_request(store: Store) -> None:
    # GIVEN a thread with messages
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg(f"m{n}") for n in range(1, 6)])
    # WHEN one page is read back, then one forward
    before = store.request_count
    await store.threads.read_back("tenant-a", "t1", before_seq=4, limit=2)
    after_back = store.request_count
    await store.threads.read_forward("tenant-a", "t1", after_seq=1, limit=2)
    # THEN each cost exactly one store request
    assert (after_back - before, store.request_count - after_back) == (1, 1)


async def test_messages_round_trip_with_every_field(store: Store) -> None:
    # GIVEN an assistant message with tool calls, metadata, flags and unicode
    await store.threads.open_thread(ALICE, "t1")
    original = Message(
        id="m1",
        thread_id="t1",
        role=Role.ASSISTANT,
        content="héllo 😀 世界",
        tool_calls=(ToolCall(id="c1", name="get_current_time", arguments='{"tz":"Europe/Berlin"}'),),
        run_id="r1",
        meta=ExecutionMeta(
            origin=Origin.AUTOMATION, executor=ExecutorKind.MEMORY, execution_profile_name="p", hidden_from_user=True
        ),
        flags={"partial": True},
    )
    tool_result = Message(id="m2", thread_id="t1", role=Role.TOOL, content="{}", tool_call_id="c1", run_id="r1")
    # WHEN stored and read back
    stored = await store.threads.append_messages(ALICE, "t1", [original, tool_result])
    read = await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=10)
    # THEN every field survives, with the seq and the parent the store assigned
    assert read == [
        original.model_copy(update={"seq": 1, "parent_id": None}),
        tool_result.model_copy(update={"seq": 2, "parent_id": "m1"}),
    ]
    assert read == stored


async def test_open_approval_interrupts_are_kept_on_the_thread_until_their_call_is_answered(store: Store) -> None:
    # GIVEN an assistant message holding a call for approval (shared.executors.approvals), stored and read back
    await store.threads.open_thread(ALICE, "t1")
    request = ApprovalRequest(
        "int_1",
        "c1",
        "send_email",
        utc_now() + timedelta(hours=24),
        {"type": "object", "properties": {"to": {"type": "string"}}},
    )
    held = Message(
        id="m1",
        thread_id="t1",
        role=Role.ASSISTANT,
        content="",
        tool_calls=(ToolCall(id="c1", name="send_email", arguments='{"to": "a"}'),),
        flags={APPROVAL_FLAG: [request.to_flag()]},
    )
    await store.threads.append_messages(ALICE, "t1", [msg("u1", role=Role.USER), held])
    newest = await store.threads.read_back("tenant-a", "t1", before_seq=None, limit=10)
    # THEN the interrupt is open, exactly as it was raised (its expiry to the microsecond, its schema)
    assert open_requests(newest) == [request]
    assert requests_on_record(newest)["int_1"].message_id == "m1"
    # AND once its call has a result, it is answered: no longer open, still on record
    result = Message(id="r1", thread_id="t1", role=Role.TOOL, content="{}", tool_call_id="c1")
    await store.threads.append_messages(ALICE, "t1", [result])
    newest = await store.threads.read_back("tenant-a", "t1", before_seq=None, limit=10)
    assert open_requests(newest) == [] and set(requests_on_record(newest)) == {"int_1"}


async def test_large_content_is_capped_and_flagged(store: Store) -> None:
    # GIVEN one message just at the cap and one far above it
    cap = dynamo_codec.MAX_CONTENT_CHARS
    await store.threads.open_thread(ALICE, "t1")
    at_cap = msg("fits", content="a" * cap)
    huge = msg("huge", role=Role.TOOL, content="b" * (cap + 50_000))
    # WHEN both are stored
    await store.threads.append_messages(ALICE, "t1", [at_cap, huge])
    fits, capped = await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=10)
    # THEN the first is untouched, the second cut to the cap and flagged with its original length
    assert (len(fits.content), fits.flags) == (cap, {})
    assert capped.content == "b" * cap
    assert capped.flags == {"truncated_from_chars": cap + 50_000}


# ---- claims ------------------------------------------------------------------------------------------------


def fifteen_minutes_ago() -> datetime:
    return utc_now() - timedelta(minutes=15)


async def test_claim_refuses_a_second_live_run(store: Store) -> None:
    # GIVEN r1 holds the thread
    await store.threads.open_thread(ALICE, "t1")
    assert await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago()) is True
    # WHEN r2 tries to claim it  THEN refused, and r1 still holds it
    assert await store.threads.claim_thread(ALICE, "t1", "r2", stale_before=fifteen_minutes_ago()) is False
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id == "r1"


async def test_claim_allows_the_same_run_again(store: Store) -> None:
    # GIVEN r1 holds the thread  WHEN r1 claims again (a retried admission)  THEN allowed
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    assert await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago()) is True
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id == "r1"


async def test_claim_allows_another_run_after_release(store: Store) -> None:
    # GIVEN r1 held the thread and released it
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    await store.threads.release_thread("tenant-a", "t1", "r1")
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id is None
    # WHEN r2 claims it  THEN allowed
    assert await store.threads.claim_thread(ALICE, "t1", "r2", stale_before=fifteen_minutes_ago()) is True
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id == "r2"


async def test_release_by_a_run_that_does_not_hold_the_thread_changes_nothing(store: Store) -> None:
    # GIVEN r1 holds the thread  WHEN r2 releases it  THEN r1 still holds it
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    await store.threads.release_thread("tenant-a", "t1", "r2")
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id == "r1"
    assert await store.threads.claim_thread(ALICE, "t1", "r2", stale_before=fifteen_minutes_ago()) is False


async def test_claim_allows_another_run_when_the_holder_is_stale(store: Store) -> None:
    # GIVEN r1 claimed the thread a moment ago
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    await asyncio.sleep(0.002)
    # WHEN r2 claims it, counting every claim older than now as stale  THEN allowed
    assert await store.threads.claim_thread(ALICE, "t1", "r2", stale_before=utc_now()) is True
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id == "r2"


async def test_claim_of_someone_elses_thread_is_refused(store: Store) -> None:
    # GIVEN alice's idle thread  WHEN bob's run claims it  THEN refused and the thread stays idle
    await store.threads.open_thread(ALICE, "t1")
    assert await store.threads.claim_thread(BOB, "t1", "r1", stale_before=fifteen_minutes_ago()) is False
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id is None


# ---- lease takeover ------------------------------------------------------------------------------------------


def a_lease_cutoff() -> datetime:
    """Leases renewed before this have expired (a 30 s lease)."""
    return utc_now() - timedelta(seconds=30)


async def test_take_over_refuses_while_the_holders_lease_is_alive(store: Store) -> None:
    # GIVEN r1 holds the thread and its run beats
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    await store.runs.create_run(a_run("r1"))
    # WHEN r2 tries to take it over  THEN refused, r1 keeps it
    assert await store.threads.take_over_thread(ALICE, "t1", "r2", lease_expired_before=a_lease_cutoff()) is None
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id == "r1"


async def test_take_over_hands_the_thread_over_once_the_holders_lease_expired(store: Store) -> None:
    # GIVEN r1 holds the thread and its last heartbeat is a minute old
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    await store.runs.create_run(a_run("r1").model_copy(update={"heartbeat_at": utc_now() - timedelta(minutes=1)}))
    # WHEN r2 takes it over  THEN it gets the thread and learns the old run, which is left for it to close
    takeover = await store.threads.take_over_thread(ALICE, "t1", "r2", lease_expired_before=a_lease_cutoff())
    assert takeover is not None and takeover.previous_run_id == "r1"
    assert takeover.previous is not None and takeover.previous.status is RunStatus.RUNNING
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id == "r2"
    # AND a second taker (r3) is refused: r2's claim is fresh and r2 has no run record yet
    assert await store.threads.take_over_thread(ALICE, "t1", "r3", lease_expired_before=a_lease_cutoff()) is None


async def test_take_over_of_a_holder_that_already_ended_or_never_stored_its_run(store: Store) -> None:
    # GIVEN a thread still claimed by a run that ended (its release was lost)
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    await store.runs.create_run(a_run("r1"))
    await store.runs.finish_run("tenant-a", "r1", status="succeeded", usage=[], last_stream_id=None)
    # THEN it is taken over at once
    takeover = await store.threads.take_over_thread(ALICE, "t1", "r2", lease_expired_before=a_lease_cutoff())
    assert takeover is not None and takeover.previous is not None and takeover.previous.status.is_terminal
    # AND a claim whose run was never stored is taken over only once the claim itself is older than the lease
    await store.threads.open_thread(ALICE, "t2")
    await store.threads.claim_thread(ALICE, "t2", "ghost", stale_before=fifteen_minutes_ago())
    assert await store.threads.take_over_thread(ALICE, "t2", "r3", lease_expired_before=a_lease_cutoff()) is None
    await asyncio.sleep(0.002)
    takeover = await store.threads.take_over_thread(ALICE, "t2", "r3", lease_expired_before=utc_now())
    assert takeover is not None and (takeover.previous_run_id, takeover.previous) == ("ghost", None)


async def test_take_over_of_someone_elses_thread_is_refused(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    assert await store.threads.take_over_thread(BOB, "t1", "r2", lease_expired_before=utc_now()) is None
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id == "r1"


async def test_a_heartbeat_returns_the_record_with_a_cancel_asked_through_the_ledger(store: Store) -> None:
    await store.runs.create_run(a_run("r1"))
    await store.runs.request_cancel("tenant-a", "r1")
    beat = await store.runs.heartbeat("tenant-a", "r1", last_stream_id="5-0")
    assert beat.cancel_requested and beat.status is RunStatus.RUNNING and beat.last_stream_id == "5-0"


# ---- admission in two requests: open_and_claim, admit_messages ----------------------------------------------


async def test_open_and_claim_creates_a_new_thread_claimed_for_the_run(store: Store) -> None:
    # WHEN a run opens and claims a thread that does not exist
    claim = await store.threads.open_and_claim(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    # THEN the thread is the caller's, empty, and held by the run
    assert claim is not None and (claim.last_seq, claim.newly_claimed) == (0, True)
    thread = await store.threads.get_thread(ALICE, "t1")
    assert (thread.owner_user_id, thread.last_seq, thread.active_run_id) == ("alice", 0, "r1")
    threads, _ = await store.threads.list_threads(ALICE, limit=10, cursor=None)
    assert [t.thread_id for t in threads] == ["t1"]


async def test_open_and_claim_of_an_existing_thread_returns_its_counter_and_leaves_it_unchanged(store: Store) -> None:
    opened = await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg("m1"), msg("m2")])
    claim = await store.threads.open_and_claim(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    assert claim is not None and claim.last_seq == 2
    thread = await store.threads.get_thread(ALICE, "t1")
    assert (thread.created_at, thread.owner_user_id, thread.last_seq) == (opened.created_at, "alice", 2)


async def test_open_and_claim_refuses_while_another_live_run_holds_the_thread(store: Store) -> None:
    await store.threads.open_and_claim(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    assert await store.threads.open_and_claim(ALICE, "t1", "r2", stale_before=fifteen_minutes_ago()) is None
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id == "r1"
    # the same run again (a retried admission) keeps it, and says it held it already
    again = await store.threads.open_and_claim(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    assert again is not None and again.newly_claimed is False
    # a holder older than the stale cut-off is replaced
    taken = await store.threads.open_and_claim(ALICE, "t1", "r3", stale_before=utc_now() + timedelta(seconds=1))
    assert taken is not None and taken.newly_claimed is True
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id == "r3"


async def test_open_and_claim_of_someone_elses_thread_is_not_found_and_changes_nothing(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    with pytest.raises(NotFound):
        await store.threads.open_and_claim(BOB, "t1", "rb", stale_before=fifteen_minutes_ago())
    thread = await store.threads.get_thread(ALICE, "t1")
    assert (thread.owner_user_id, thread.active_run_id) == ("alice", None)
    # the same thread id in another tenant is another thread
    elsewhere = await store.threads.open_and_claim(ALICE_ELSEWHERE, "t1", "rx", stale_before=fifteen_minutes_ago())
    assert elsewhere is not None and elsewhere.last_seq == 0


async def test_admit_messages_stores_the_messages_and_the_run_together(store: Store) -> None:
    claim = await store.threads.open_and_claim(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    assert claim is not None
    run, created, stored = await store.threads.admit_messages(
        ALICE, "t1", [msg("m1"), msg("m2")], a_run("r1"), last_seq=claim.last_seq
    )
    assert created is True and run.run_id == "r1"
    assert [m.seq for m in await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=10)] == [1, 2]
    assert [(m.id, m.seq) for m in stored] == [("m1", 1), ("m2", 2)]
    assert await store.runs.get_run("tenant-a", "r1") is not None


async def test_admit_messages_returns_the_messages_exactly_as_a_read_returns_them(store: Store) -> None:
    # GIVEN a thread with one message, and a run whose second message is over the content cap
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg("m0")])
    huge = msg("m2").model_copy(update={"content": "x" * 100_001})
    # WHEN the run is admitted with them
    _run, _created, stored = await store.threads.admit_messages(ALICE, "t1", [msg("m1"), huge], a_run("r1"), last_seq=1)
    # THEN what it returns is what the thread's next read returns (numbered, capped and flagged)
    read = await store.threads.read_back("tenant-a", "t1", before_seq=None, limit=2)
    assert stored == list(reversed(read))
    assert stored[1].flags.get("truncated_from_chars") == 100_001 and len(stored[1].content) == 100_000


async def test_admit_messages_of_an_existing_run_stores_nothing_and_returns_it(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.admit_messages(ALICE, "t1", [msg("m1")], a_run("r1", digest="first"), last_seq=0)
    # WHEN the same run id comes again with another body and a new message
    existing, created, stored = await store.threads.admit_messages(
        ALICE, "t1", [msg("m2")], a_run("r1", digest="second"), last_seq=1
    )
    # THEN the stored run comes back and the new message was not stored
    assert created is False and existing.body_digest == "first" and stored == []
    assert [m.id for m in await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=10)] == ["m1"]


async def test_admit_messages_with_an_outdated_counter_still_numbers_after_the_newest(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    await store.threads.append_messages(ALICE, "t1", [msg("m1")])
    # a counter read before m1 was appended
    await store.threads.admit_messages(ALICE, "t1", [msg("m2"), msg("m1")], a_run("r1"), last_seq=0)
    stored = await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=10)
    assert [(m.id, m.seq) for m in stored] == [("m1", 1), ("m2", 2)]


async def test_admit_messages_without_messages_creates_only_the_run(store: Store) -> None:
    await store.threads.open_thread(ALICE, "t1")
    _run, created, _stored = await store.threads.admit_messages(ALICE, "t1", [], a_run("r1"), last_seq=0)
    assert created is True and await store.runs.get_run("tenant-a", "r1") is not None
    assert (await store.threads.get_thread(ALICE, "t1")).last_seq == 0


async def test_forget_thread_deletes_only_an_empty_thread_created_and_held_by_the_run(store: Store) -> None:
    claim = await store.threads.open_and_claim(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    assert claim is not None and claim.created is True
    await store.threads.forget_thread(ALICE, "t1", "r2")  # another run: kept
    await store.threads.forget_thread(BOB, "t1", "r1")  # another user: kept
    assert (await store.threads.get_thread(ALICE, "t1")).active_run_id == "r1"
    await store.threads.forget_thread(ALICE, "t1", "r1")
    with pytest.raises(NotFound):
        await store.threads.get_thread(ALICE, "t1")
    # a thread with messages is never forgotten
    claim = await store.threads.open_and_claim(ALICE, "t2", "r3", stale_before=fifteen_minutes_ago())
    assert claim is not None
    await store.threads.admit_messages(ALICE, "t2", [msg("m1", "t2")], a_run("r3", "t2"), last_seq=0)
    again = await store.threads.open_and_claim(ALICE, "t2", "r3", stale_before=fifteen_minutes_ago())
    assert again is not None and again.created is False
    await store.threads.forget_thread(ALICE, "t2", "r3")
    assert (await store.threads.get_thread(ALICE, "t2")).last_seq == 1


# ---- erasure: delete_thread ----------------------------------------------------------------------------------


async def a_thread_with_history(store: Store, thread_id: str = "t1", identity: Identity = ALICE) -> None:
    await store.threads.open_thread(identity, thread_id)
    await store.threads.append_messages(identity, thread_id, [msg(f"{thread_id}-m{i}", thread_id) for i in range(30)])
    for run_id in (f"{thread_id}-r1", f"{thread_id}-r2"):
        await store.runs.create_run(a_run(run_id, thread_id, identity))
    await store.audit.record(audit("tool_allowed", thread_id=thread_id, tenant_id=identity.tenant_id))


async def test_delete_thread_removes_messages_runs_and_the_thread_and_keeps_the_audit(store: Store) -> None:
    # GIVEN alice's thread with 30 messages, 2 runs and an audit record, and her other thread t2
    await a_thread_with_history(store)
    await a_thread_with_history(store, "t2")
    assert await store.threads.claim_thread(ALICE, "t1", "erase-1", stale_before=fifteen_minutes_ago())
    # WHEN it is deleted under the eraser's claim
    deleted = await store.threads.delete_thread(ALICE, "t1", holder="erase-1")
    # THEN its runs are named, and nothing of it is left but the audit record
    assert sorted(deleted) == ["t1-r1", "t1-r2"]
    with pytest.raises(NotFound):
        await store.threads.get_thread(ALICE, "t1")
    assert await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=100) == []
    assert await store.threads.known_message_ids("tenant-a", "t1", ["t1-m0", "t1-m29"]) == set()
    assert await store.runs.get_run("tenant-a", "t1-r1") is None
    assert await store.runs.list_runs_for_thread("tenant-a", "t1", limit=10) == []
    assert [r.kind for r in await store.audit.list_for_thread("tenant-a", "t1", limit=10)] == ["tool_allowed"]
    assert [t.thread_id for t in (await store.threads.list_threads(ALICE, limit=10, cursor=None))[0]] == ["t2"]
    # AND the other thread is untouched
    assert len(await store.threads.read_forward("tenant-a", "t2", after_seq=0, limit=100)) == 30
    assert await store.runs.get_run("tenant-a", "t2-r1") is not None


async def test_a_deleted_thread_id_starts_a_new_empty_thread(store: Store) -> None:
    # GIVEN a deleted thread  WHEN its id is opened again  THEN a new thread with no history and seq from 1
    await a_thread_with_history(store)
    await store.threads.claim_thread(ALICE, "t1", "erase-1", stale_before=fifteen_minutes_ago())
    await store.threads.delete_thread(ALICE, "t1", holder="erase-1")
    assert (await store.threads.open_thread(ALICE, "t1")).last_seq == 0
    stored = await store.threads.append_messages(ALICE, "t1", [msg("t1-m0")])
    assert [m.seq for m in stored] == [1]


async def test_delete_thread_without_holding_it_or_of_someone_elses_thread_is_not_found(store: Store) -> None:
    # GIVEN alice's thread held by her run r1, and the same id in tenant-b
    await a_thread_with_history(store)
    await store.threads.claim_thread(ALICE, "t1", "r1", stale_before=fifteen_minutes_ago())
    # WHEN bob, alice-in-another-tenant, or an eraser that does not hold it deletes it  THEN not found
    for identity, holder in ((BOB, "r1"), (ALICE_ELSEWHERE, "r1"), (ALICE, "erase-1")):
        with pytest.raises(NotFound):
            await store.threads.delete_thread(identity, "t1", holder=holder)
    # AND nothing was deleted
    assert len(await store.threads.read_forward("tenant-a", "t1", after_seq=0, limit=100)) == 30
    assert len(await store.runs.list_runs_for_thread("tenant-a", "t1", limit=10)) == 2
