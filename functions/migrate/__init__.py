"""The data migrations' entry points: the one-shot Lambda function (``handler``) and the operators' command line
(``python -m functions.migrate``). Everything they run is in ``shared.migrations`` and the runner adapter."""
