"""What the evaluation commands (intent regression, memory evaluation) share: how a threshold is judged and said."""

from __future__ import annotations


def threshold_verdict(name: str, value: float, minimum: float | None) -> tuple[str, bool]:
    """The line that says which threshold was used and whether ``value`` met it; and whether it failed."""
    if minimum is None:
        return (
            f"threshold: none (--{name.replace('_', '-')} not given): the exit status does not judge the score",
            False,
        )
    failed = value < minimum
    verdict = "FAIL" if failed else "PASS"
    return f"threshold: --{name.replace('_', '-')} {minimum:.3f}; measured {value:.3f}: {verdict}", failed
