"""The model port's wire-independent types and its adapters (OpenAI-compatible HTTP, offline); the port itself is
``shared.ports.model.ChatModel``."""
