"""Facts about a file's bytes that every layer may ask: its type by magic number, an image's size from its header,
and what an image costs a Qwen model in tokens. Pure functions of bytes, importing nothing of the project, so the
token estimates (``shared.tokens``, ``shared.llm``) and the attachments package alike stand above them."""
