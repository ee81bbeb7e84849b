"""The overhead benchmark's server processes keep serving however much they print after READY."""

from __future__ import annotations

import subprocess
import sys

from bench.server_overhead import Child

CHATTY = """
import sys
print("READY http://127.0.0.1:1", flush=True)
line = "x" * 749 + "\\n"  # about one run-metrics line of the app
for _ in range(400):  # about 300 KiB: several times a pipe's buffer
    sys.stdout.write(line)
    sys.stdout.flush()
"""


def test_a_server_printing_far_more_than_a_pipe_holds_after_ready_is_not_blocked() -> None:
    child = Child(["chatty"], program=[sys.executable, "-c", CHATTY]).wait_ready()
    try:
        assert child.url == "http://127.0.0.1:1"
        # Blocked in a write to a full, unread pipe, the process would never get here (as ``ours`` stalled).
        assert child.proc.wait(timeout=20) == 0
    except subprocess.TimeoutExpired:
        raise AssertionError("the server blocked writing to its standard output") from None
    finally:
        child.stop()
