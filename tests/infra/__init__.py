"""Offline checks of template.yaml (expanded with the SAM translator, no AWS account, no Docker)."""
