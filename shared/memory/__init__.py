"""Long-term memory: the memory executor, its deterministic quality gate, the store and the trigger path.

Flow (see ``docs/memory.md``): a finished worker run publishes ``agent.run.completed`` to EventBridge
(:mod:`shared.memory.trigger`); a rule delivers it to SQS; ``functions/memory_extract`` hands it to
:class:`~shared.memory.coalescing.ExtractionCoalescer`, which extracts once per thread per quiet period (a delayed
SQS message, a per-thread marker behind the ``PendingExtractions`` port) through
:class:`~shared.memory.job.MemoryExtraction`, which admits a hidden ``memory`` run whose executor
(:class:`~shared.memory.executor.MemoryExecutor`) shows the model the thread's unprocessed messages and the user's
related memories; every ``memory_write`` / ``memory_forget`` call is a proposal that
:class:`~shared.memory.gate.MemoryGate` accepts, merges or rejects, and records. The worker sees the user's active
memories through :func:`~shared.memory.injection.render_memories`.
"""
