"""Starts the embedded AWS emulation (moto, in-process) and an in-process Redis-compatible stream store."""

from __future__ import annotations

import os
from typing import Any

import boto3

from shared.adapters.aws.clients import serialise_calls, serialised
from shared.adapters.aws.migration_runner import MigrationRunner
from shared.adapters.aws.table_schema import create_table
from shared.settings import Settings


class EmbeddedAws:
    """moto's ``mock_aws`` for the life of the process, with the table created as template.yaml defines it and its
    migrations run, and the attachment bucket (``ATTACHMENTS_BUCKET``) created when it is set and no S3 endpoint is.

    moto in-process is not thread-safe, so every AWS client of the process sends one request at a time
    (``shared.adapters.aws.clients.serialise_calls``)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._mock: Any = None

    def start(self) -> None:
        from moto import mock_aws

        for name, value in (
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_DEFAULT_REGION", self._settings.aws_region),
        ):
            os.environ.setdefault(name, value)
        serialise_calls()
        self._mock = mock_aws()
        self._mock.start()
        client = serialised(boto3.client("dynamodb", region_name=self._settings.aws_region))
        create_table(client, self._settings.table_name)
        # A new table, as a new stack's: its migrations complete at once (docs/deployment.md "Upgrading: data
        # migrations"), so /healthz lists none pending and the memory read takes the index.
        MigrationRunner(self._settings.table_name, client).run_pending()
        bucket = self._settings.attachments_bucket
        if bucket and not self._settings.s3_endpoint_url:
            serialised(boto3.client("s3", region_name=self._settings.aws_region)).create_bucket(Bucket=bucket)

    def stop(self) -> None:
        if self._mock is not None:
            self._mock.stop()
            self._mock = None
            serialise_calls(on=False)


def embedded_stream_client() -> Any:
    """An async Redis-compatible client backed by process memory (fakeredis), for when REDIS_URL is unset."""
    import fakeredis

    return fakeredis.FakeAsyncRedis()
