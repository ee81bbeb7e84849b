"""Embedded defaults for running on a laptop with no cloud account: moto for AWS, an in-process stream store."""
