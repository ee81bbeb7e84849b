"""The model port's wire-independent types and its adapters (OpenAI-compatible HTTP, offline)."""
