"""The in-memory fakes of every port, one module per port (or aggregate), each run by the same contract suite as
the real adapter (``tests/contract``): ``store`` (with ``threads``, ``runs``, ``audit`` and their shared request
``meter``), ``stream``, ``config``, ``due_queue``, ``invoker``, ``publisher`` and ``scheduler``."""
