"""Read and write units of feedback on DynamoDB (moto), counted with the project's DynamoDB meter
(``bench/dynamo_meter.py``): what docs/storage.md "Feedback" quotes. A tenant with 200 judged answers (10 threads of
20 turns, answers of about 1.5 KB, feedback with a comment and two tags), and another tenant's feedback beside it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from shared.models import ExecutionMeta, Feedback, Identity, Message, Role, Usage, utc_now
from tests.support.metered_table import USER, metered_store
from tests.support.table_stores import a_run

THREADS, TURNS = 10, 20
OTHER = Identity(tenant_id="tenant-b", user_id="carol")


async def _seed(store: Any, who: Identity, threads: int) -> None:
    for t in range(threads):
        tid, run_id = f"th-{t}", f"run-{t}"
        await store.runs.create_run(a_run(run_id, tid, who))
        await store.runs.finish_run(
            who.tenant_id, run_id, status="succeeded", usage=[Usage(model="qwen3.5-flash")], last_stream_id=None
        )
        await store.threads.open_thread(who, tid)
        meta = ExecutionMeta(execution_profile_name="chat_fast")
        batch = []
        for i in range(TURNS):
            batch.append(Message(id=f"q{t}-{i}", thread_id=tid, role=Role.USER, content="a question " * 5))
            answer = "an answer of some length " * 60
            batch.append(
                Message(id=f"a{t}-{i}", thread_id=tid, role=Role.ASSISTANT, content=answer, run_id=run_id, meta=meta)
            )
        await store.threads.append_messages(who, tid, batch)
        for i in range(TURNS):
            judged = Feedback(
                score=1, comment="clear and to the point, thanks", tags=("clear", "fast"), user_id=who.user_id
            )
            await store.threads.set_feedback(who, tid, f"a{t}-{i}", judged)


async def test_an_export_reads_only_the_tenants_feedback_entries_and_giving_feedback_is_one_transaction(
    aws: Any,
) -> None:
    # GIVEN 200 judged answers of one tenant and 20 of another, on DynamoDB, metered
    store, meter = metered_store(aws)
    meter.enabled = False
    await _seed(store, USER, THREADS)
    await _seed(store, OTHER, 1)
    meter.enabled = True
    since, until = utc_now() - timedelta(hours=1), utc_now() + timedelta(minutes=1)

    # WHEN the tenant's feedback is exported in one page, then in pages of 50
    before = meter.snapshot()
    entries, after = await store.threads.list_feedback(USER.tenant_id, since=since, until=until, limit=1000, after=None)
    whole = meter.snapshot().minus(before)
    before = meter.snapshot()
    pages, after_page = 0, None
    while True:
        _, after_page = await store.threads.list_feedback(
            USER.tenant_id, since=since, until=until, limit=50, after=after_page
        )
        pages += 1
        if after_page is None:
            break
    paged = meter.snapshot().minus(before)

    # AND feedback is given on an answer, then removed
    before = meter.snapshot()
    await store.threads.set_feedback(USER, "th-0", "a0-0", Feedback(score=-1, comment="no", user_id=USER.user_id))
    given = meter.snapshot().minus(before)
    before = meter.snapshot()
    await store.threads.set_feedback(USER, "th-0", "a0-0", None)
    removed = meter.snapshot().minus(before)
    print(
        "feedback units:",
        {
            "export of 200": (whole.rru, dict(whole.requests)),
            f"paged by 50 ({pages} pages)": (paged.rru, dict(paged.requests)),
        },
        {
            "give": (given.rru, given.wru, given.index_wru, dict(given.requests)),
            "remove": (removed.rru, removed.wru, dict(removed.requests)),
        },
    )

    # THEN the export is the tenant's 200, each with its model, from Queries of the tenant's feedback partition only
    assert len(entries) == THREADS * TURNS and after is None
    assert {e.model for e in entries} == {"qwen3.5-flash"}
    assert set(whole.units_by_pattern) == {"agent-test/GSI1:T#*#FEEDBACK"}, whole.units_by_pattern
    # (moto leaves out the last full page's LastEvaluatedKey when nothing follows; DynamoDB sends it: a 5th, empty page)
    assert whole.requests == {"Query": 1} and paged.requests == {"Query": pages} and pages in (4, 5)
    # AND it reads the small entries, not the answers: 200 entries of about 360 bytes are 9 units (eventually
    # consistent; measured 9), where the 200 answers alone (~1.5 KB each) would be about 40
    assert whole.rru <= 10, whole.rru
    assert paged.rru <= whole.rru + pages, (paged.rru, whole.rru)
    # AND giving feedback is four reads (thread, marker, message, run) and one transaction of two items
    assert given.requests == {"GetItem": 4, "TransactWriteItems": 1}, given.requests
    assert removed.requests == {"GetItem": 3, "TransactWriteItems": 1}, removed.requests
