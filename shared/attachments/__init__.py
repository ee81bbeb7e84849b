"""Images and files in a user message (AG-UI ``image`` / ``document`` parts): read and checked at intake, stored in
the stack's bucket, sent to the model, read back by the history (docs/protocols/agent/run-agent-input.md §3.4).

- ``media``: what the bytes are (magic numbers) and an image's size, from its header, with no library;
- ``limits``: the bounds an intake applies, from the settings;
- ``parts``: the parts of a ``RunAgentInput`` user message as :class:`~shared.models.MessagePart` values;
- ``url_safety``: a client's URL source, checked without ever fetching it;
- ``pdf_text``: a PDF's text, bounded;
- ``image_tokens``: what an image costs in the window (Qwen's 28x28-patch rule);
- ``placeholders``: a part as a line of text for readers that never see its bytes (the memory executor);
- ``storage``: object keys and the step that stores a message's parts before admission.
"""
