"""The automation function: EventBridge Scheduler invokes it with a task's schedule input."""
