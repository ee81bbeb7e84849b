"""Scheduled automation tasks: CRUD with their EventBridge Scheduler schedules, and the runner of a fire.

- ``models``: the task, its schedule-expression checks, the schedule's input (``TaskRef``);
- ``store``: the task store's in-memory fake (the port is ``shared.ports.automation``, the DynamoDB adapter is in
  ``shared.adapters.aws``);
- ``service``: owner-scoped CRUD keeping task and schedule in step, and the wiring factories;
- ``runner``: runs one fire of a task exactly once, with the task's profile, on the task's thread.
"""
