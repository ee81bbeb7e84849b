"""Runs: admission, the event emitter, execution in the background and the tails that stream events out."""
