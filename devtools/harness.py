"""What the evaluation commands (intent regression, memory evaluation) share: how a threshold is judged and said."""

from __future__ import annotations

import argparse


def fraction(text: str) -> float:
    """An argparse type for a threshold: a number between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number between 0 and 1") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 1")
    return value


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
