"""What a run writes as it goes (its AG-UI events, its tool results).

It sits below both ``shared.runs`` and ``shared.executors``, so an executor never imports the run service's package.
"""
