"""Package data: ``qwen.tiktoken``, the Qwen BPE vocabulary (151,643 ranks; 2.5 MB).

Copied unchanged from the ``dashscope`` SDK (Apache License 2.0), which ships it for the same purpose; the
vocabulary is Qwen's own (its models are Apache-2.0). Read by :mod:`shared.tokens` with ``tiktoken``.
"""
