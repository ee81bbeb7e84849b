"""Adapters implementing the ports in ``shared.ports`` on real services (DynamoDB, Redis) and in memory."""
