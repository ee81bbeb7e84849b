"""The objects a process builds while it starts (modules, classes, clients, caches) live as long as it does.

``gc.freeze`` moves them out of the collector's generations, so that a full collection walks only what requests
made since. Without it, a full collection in the API process walked every imported module and class as well: in
the server-overhead benchmark (96 runs, 16 at a time), the one full collection after start-up held the event loop
for 189 ms, a stall every run in flight waited through (docs/benchmarks.md, "Time to first text").

No collection runs first: ``gc.freeze`` alone takes well under a millisecond, while a full collection of a started
process (about 127,000 tracked objects in the automation function) takes 120-160 ms of INIT and found 23
unreachable objects. Those few stay frozen; a frozen cycle is never reclaimed, which for start-up objects that live
as long as the process costs nothing.
"""

from __future__ import annotations

import gc
import logging

logger = logging.getLogger(__name__)


def freeze_startup_heap() -> int:
    """Freeze every object the collector tracks now; returns how many are frozen.

    Called at the end of each function's initialisation (the API's lifespan, ``init_container``); calling it again
    freezes what was built since."""
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.debug("start-up heap frozen", extra={"objects": frozen})
    return frozen
