"""Scheduled automation tasks: CRUD with their EventBridge Scheduler schedules, and the runner of a fire.

The task store's port is ``shared.automation.ports``; its fake is in ``shared.adapters.in_memory``, its DynamoDB
adapter in ``shared.adapters.aws``.

- ``models``: the task, its schedule-expression checks, the schedule's input (``TaskRef``);
- ``service``: owner-scoped CRUD keeping task and schedule in step, and the wiring factories;
- ``runner``: runs one fire of a task exactly once, with the task's profile, on the task's thread.
"""
