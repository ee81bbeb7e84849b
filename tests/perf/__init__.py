"""The perf tier: tests that pin performance mechanics (loop passes, requests sent ahead, reads done beside
admission, events encoded once), not behaviour a caller sees. ``make test`` (plain ``pytest``) runs it; the unit tier
does not contain it, so a change that drops a mechanism on purpose removes its tests here and leaves the unit tier
untouched."""
