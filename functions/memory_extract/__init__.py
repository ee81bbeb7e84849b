"""The memory extraction Lambda: SQS batches of ``agent.run.completed`` events -> hidden memory runs."""
