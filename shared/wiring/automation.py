"""Automation tasks (their service, schedules and runner) and erasure, which deletes tasks with the rest."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, cast

from shared.errors import ConfigurationError
from shared.models import ExecutorKind
from shared.runs.service import Executor
from shared.wiring.memory import MemoryProviders
from shared.wiring.overrides import overridable

if TYPE_CHECKING:
    from shared.automation.ports import TaskScheduler
    from shared.automation.runner import AutomationRunner
    from shared.automation.service import AutomationService
    from shared.erasure import Erasure

LOCAL_FUNCTION_ARN = "arn:aws:lambda:{region}:000000000000:function:automation-local"
LOCAL_ROLE_ARN = "arn:aws:iam::000000000000:role/scheduler-local"


class AutomationProviders(MemoryProviders):
    """Scheduled tasks and erasure, on memory's and the run path's parts."""

    @overridable("automation_scheduler")
    def task_scheduler(self) -> TaskScheduler:
        """EventBridge Scheduler with the configured group, target and role. The embedded local runner (moto) gets
        placeholder ARNs; anywhere else a missing setting is a start-up error."""
        from shared.adapters.aws.clients import client_factory
        from shared.adapters.aws.scheduler import EventBridgeTaskScheduler

        settings = self.settings
        target, role = settings.automation_function_arn, settings.scheduler_role_arn
        if settings.embedded:
            target = target or LOCAL_FUNCTION_ARN.format(region=settings.aws_region)
            role = role or LOCAL_ROLE_ARN
        if not target or not role:
            needed = (("AUTOMATION_FUNCTION_ARN", target), ("SCHEDULER_ROLE_ARN", role))
            missing = [name for name, value in needed if not value]
            raise ConfigurationError(
                f"automation tasks need {', '.join(missing)} (set by template.yaml)", code="scheduler_not_configured"
            )
        return EventBridgeTaskScheduler(
            client_factory("scheduler", region=settings.aws_region),
            group_name=settings.scheduler_group_name or "default",
            target_arn=target,
            role_arn=role,
            dead_letter_arn=settings.scheduler_dead_letter_arn,
        )

    @cached_property
    def erasure(self) -> Erasure:
        """Deletes a thread or all of a user's data (``DELETE /threads/{id}``, ``DELETE /me``); the automation
        service is built only when the user has tasks (it needs the Scheduler's settings)."""
        from shared.erasure import ErasableStreams, Erasure

        # Both stream adapters (Redis, in-memory) delete keys; the EventStream port leaves it out, for its fakes.
        return Erasure(
            self.thread_store,
            self.audit_log,
            cast(ErasableStreams, self.stream),
            self.pending_extractions,
            self.memories,
            self.automation_store,
            lambda: self.automation_service,
            states=self.thread_states,
            attachments=self.attachments,
        )

    @cached_property
    def automation_service(self) -> AutomationService:
        """Owner-scoped task CRUD, keeping each task and its schedule in step."""
        from shared.automation.service import AutomationService

        return AutomationService(
            self.automation_store, self.task_scheduler, self.thread_store, self.profiles, self.tools.names
        )

    @cached_property
    def automation_runner(self) -> AutomationRunner:
        """Runs a fired task on the executor its profile names (a fresh executor per fire)."""
        from shared.automation.runner import AutomationRunner

        def executor_for(kind: ExecutorKind) -> Executor:
            return self.worker() if kind is ExecutorKind.WORKER else self.memory_executor()

        return AutomationRunner(
            self.automation_store,
            self.runs,
            self.run_ledger,
            self.audit_log,
            self.profiles,
            executor_for,
            memory_leases=self.pending_extractions,
            served=self.served_tenants,
        )
