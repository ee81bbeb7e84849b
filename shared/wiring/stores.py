"""The main table's adapters, one per aggregate, all on the process's one DynamoDB client."""

from __future__ import annotations

from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING

from shared.wiring.base import ProviderBase
from shared.wiring.overrides import MainTable, overridable

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

    from shared.attachments.limits import AttachmentLimits
    from shared.attachments.uploads import Uploads
    from shared.automation.ports import AutomationStore
    from shared.limits.ports import UsageCounters
    from shared.memory.ports import MemoryStore, PendingExtractions
    from shared.migrations.ports import MigrationLog
    from shared.migrations.status import PendingMigrations
    from shared.ports import AuditLog, RunLedger, ThreadStore
    from shared.ports.attachments import AttachmentStore
    from shared.ports.run_queue import RunQueue
    from shared.ports.thread_state import ThreadStateStore


class StoreProviders(ProviderBase):
    """Threads, runs and audit; thread state; memories and their markers; tasks; usage; the migration log."""

    @overridable("store")
    def store(self) -> MainTable:
        """The main table's three aggregates (threads and messages, runs, audit), each its own adapter, built here
        and only here; components take them one by one (``thread_store``, ``run_ledger``, ``audit_log``)."""
        from shared.adapters.aws.dynamodb_store import DynamoDBStore
        from shared.adapters.aws.table_schema import Retention

        settings = self.settings
        return DynamoDBStore(
            settings.table_name,
            self._dynamodb,
            retention=Retention(
                run=timedelta(days=settings.run_retention_days), audit=timedelta(days=settings.audit_retention_days)
            ),
            thread_list_complete=self._thread_list_complete,
        )

    async def _thread_list_complete(self) -> bool:
        """Whether every thread is in the thread-list index (migration 2 recorded as completed); not known: False,
        and the listing reads the old index too."""
        from shared.migrations.thread_list_index import THREAD_LIST_INDEX

        pending = self.pending_migrations
        return pending is not None and await pending.completed(THREAD_LIST_INDEX.id)

    @cached_property
    def thread_store(self) -> ThreadStore:
        """Threads and messages (the main table's adapter of that aggregate)."""
        return self.store.threads

    @cached_property
    def run_ledger(self) -> RunLedger:
        """The run records (the main table's adapter of that aggregate)."""
        return self.store.runs

    @cached_property
    def audit_log(self) -> AuditLog:
        """The audit records (the main table's adapter of that aggregate)."""
        return self.store.audit

    @overridable("thread_states")
    def thread_states(self) -> ThreadStateStore:
        """Each thread's shared state: DynamoDB, on the store's table (an in-memory store gets the in-memory fake)."""
        from shared.adapters.aws.dynamodb_store import DynamoDBStore
        from shared.adapters.aws.thread_state import DynamoDBThreadStates

        store = self.store
        if isinstance(store, DynamoDBStore):
            threads = store.threads
            return DynamoDBThreadStates(threads.table_name, lambda: threads.client)
        from shared.adapters.in_memory.thread_state import InMemoryThreadStates

        return InMemoryThreadStates()

    @overridable("attachments")
    def attachments(self) -> AttachmentStore:
        """The images and files of user messages: the stack's S3 bucket (``ATTACHMENTS_BUCKET``); unset: in memory."""
        settings = self.settings
        if settings.attachments_bucket is None:
            from shared.adapters.in_memory.attachments import InMemoryAttachments

            return InMemoryAttachments()
        from shared.adapters.aws.attachments import S3Attachments
        from shared.adapters.aws.clients import client_factory

        make = client_factory("s3", region=settings.aws_region, endpoint_url=settings.s3_endpoint_url)
        return S3Attachments(make, settings.attachments_bucket, presign=settings.attachment_presigned_urls)

    @cached_property
    def uploads(self) -> Uploads:
        """Uploads to the attachment store (``POST /api/v1/uploads``) and their attachment to messages."""
        from shared.attachments.uploads import Uploads

        return Uploads(self.attachments, self.attachment_limits)

    @cached_property
    def attachment_limits(self) -> AttachmentLimits:
        """The bounds of a message's images and files, from the ``ATTACHMENT_*`` settings."""
        from shared.attachments.limits import AttachmentLimits

        s = self.settings
        return AttachmentLimits(
            max_part_bytes=s.attachment_max_part_bytes,
            max_message_bytes=s.attachment_max_message_bytes,
            max_upload_bytes=s.attachment_max_upload_bytes,
            max_parts=s.attachment_max_parts,
            max_image_pixels=s.attachment_max_image_pixels,
            max_pdf_pages=s.attachment_max_pdf_pages,
            max_document_chars=s.attachment_max_document_chars,
        )

    @overridable("usage_counters")
    def usage_counters(self) -> UsageCounters:
        """The limits' counters and usage records: DynamoDB, on the main table."""
        from shared.adapters.aws.usage_counters import DynamoDBUsageCounters

        settings = self.settings
        return DynamoDBUsageCounters(
            settings.table_name,
            self._dynamodb,
            usage_retention=timedelta(days=settings.usage_retention_days),
        )

    @overridable("memory_store")
    def memories(self) -> MemoryStore:
        """The memory store: DynamoDB, on the main table."""
        from shared.adapters.aws.memory_store import DynamoDBMemoryStore

        settings = self.settings
        return DynamoDBMemoryStore(
            settings.table_name,
            self._dynamodb,
            index_complete=self._memory_index_complete,
        )

    async def _memory_index_complete(self) -> bool:
        """Whether every active memory is in the index (migration 1 recorded as completed); not known: False, and
        the memory store reads the old shape too."""
        from shared.migrations.memory_index import ACTIVE_MEMORY_INDEX

        pending = self.pending_migrations
        return pending is not None and await pending.completed(ACTIVE_MEMORY_INDEX.id)

    @overridable("migration_log")
    def migration_log(self) -> MigrationLog | None:
        """The table's record of completed migrations; None for a process given its own store and no log (tests
        on fakes): there is no table of the deployment's to read."""
        if self.overrides.store is not None:
            return None
        from shared.adapters.aws.migration_state import DynamoDBMigrationLog

        settings = self.settings
        return DynamoDBMigrationLog(
            settings.table_name,
            self._dynamodb,
        )

    @cached_property
    def pending_migrations(self) -> PendingMigrations | None:
        """Which migrations this code expects and the table has not completed, read at most every
        ``MIGRATION_STATUS_TTL_S`` (``/healthz``, the memory store's reader)."""
        log = self.migration_log
        if log is None:
            return None
        from shared.migrations.status import PendingMigrations

        return PendingMigrations(log, ttl_s=self.settings.migration_status_ttl_s)

    @overridable("pending_extractions")
    def pending_extractions(self) -> PendingExtractions:
        """The per-thread pending-extraction markers: DynamoDB, on the main table."""
        from shared.adapters.aws.memory_pending import DynamoDBPendingExtractions

        settings = self.settings
        return DynamoDBPendingExtractions(
            settings.table_name,
            self._dynamodb,
        )

    @cached_property
    def idempotency_records(self) -> DynamoDBPersistenceLayer:
        """Where the memory function records the events it handled (Powertools idempotency, its own table),
        through the process's one DynamoDB client."""
        from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

        return DynamoDBPersistenceLayer(
            table_name=self.settings.idempotency_table_name, boto3_client=self.dynamodb_client
        )

    @overridable("automation_store")
    def automation_store(self) -> AutomationStore:
        """The automation tasks: DynamoDB, on the main table."""
        from shared.adapters.aws.automation_store import DynamoDBAutomationStore

        settings = self.settings
        return DynamoDBAutomationStore(
            settings.table_name,
            self._dynamodb,
        )

    @cached_property
    def run_queue(self) -> RunQueue:
        """The runs waiting for a busy thread (``enqueue``): DynamoDB, on the store's table (an in-memory store gets
        the in-memory fake)."""
        from shared.adapters.aws.dynamodb_store import DynamoDBStore

        store = self.store
        if isinstance(store, DynamoDBStore):
            from shared.adapters.aws.run_queue import DynamoDBRunQueue

            threads = store.threads
            return DynamoDBRunQueue(threads.table_name, lambda: threads.client)
        from shared.adapters.in_memory.run_queue import InMemoryRunQueue

        return InMemoryRunQueue()
