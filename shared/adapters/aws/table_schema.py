"""The main table's shape and its records' lifetimes: what template.yaml creates, and the TTL of run and audit
records. Every adapter of the table (threads, runs, audit, memories, tasks) shares it; tests and the local runner
create the table with :func:`create_table`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

RUNNING_INDEX = "GSI2"
"""The sparse, KEYS_ONLY index of running runs (``shared.adapters.aws.runs``)."""
THREAD_LIST_INDEX = "GSI3"
"""A user's threads, most recently updated first (``GSI3PK = T#{tenant}#U#{user}#THREADS``, ``GSI3SK =
{updated_at}#{thread}``): only thread items carry its keys (``shared.adapters.aws.thread_list``)."""
THREAD_LIST_ATTRIBUTES = (
    "tenant_id",
    "thread_id",
    "owner_user_id",
    "created_at",
    "updated_at",
    "title",
    "last_message",
    "pinned",
    "archived",
)
"""What ``THREAD_LIST_INDEX`` projects besides the keys: what the thread list returns, and nothing a run changes
on every step (the message counter, the claim), so a turn writes the index once, when its release moves the sort
key. DynamoDB cannot change an index's projection in place (a new index would be needed), so the attributes a
planned thread list will show (``title``, ``last_message``, ``pinned``, ``archived``) are projected already: an
attribute no item carries costs nothing, and the list can show it once the app writes it, with no new index.
Written together with the sort key (at release), it costs no index write of its own."""


@dataclass(frozen=True)
class Retention:
    """How long run and audit records live (the table's TTL, ``expires_at``; docs/storage.md "Retention").

    Threads, messages, memories and tasks carry no TTL: they are the user's data and live until deleted.
    """

    run: timedelta = timedelta(days=90)
    audit: timedelta = timedelta(days=400)


def create_table(client: DynamoDBClient, table_name: str) -> None:
    """Create the table as template.yaml defines it (used locally and in tests)."""
    client.create_table(
        TableName=table_name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": name, "AttributeType": "S"}
            for name in ("PK", "SK", "GSI1PK", "GSI1SK", "GSI2PK", "GSI2SK", "GSI3PK", "GSI3SK")
        ],
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "GSI1",
                "KeySchema": [
                    {"AttributeName": "GSI1PK", "KeyType": "HASH"},
                    {"AttributeName": "GSI1SK", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            },
            {
                # Sparse: only running runs carry GSI2PK (see ``running_gsi``); the sweeper reads it.
                "IndexName": RUNNING_INDEX,
                "KeySchema": [
                    {"AttributeName": "GSI2PK", "KeyType": "HASH"},
                    {"AttributeName": "GSI2SK", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            },
            {
                "IndexName": THREAD_LIST_INDEX,
                "KeySchema": [
                    {"AttributeName": "GSI3PK", "KeyType": "HASH"},
                    {"AttributeName": "GSI3SK", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(THREAD_LIST_ATTRIBUTES)},
            },
        ],
    )
