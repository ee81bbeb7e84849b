"""Where a message's images and files are stored, and the step that stores them before the run is admitted.

Keys: ``{tenant}/{user}/{thread}/{message}/{n}-{digest}`` (each segment percent-encoded), so a thread's objects are
the prefix :func:`thread_prefix` and a user's :func:`user_prefix`, which deletion removes. The digest of the bytes
in the key means a client resending a message id with other bytes writes another object, never over the first.
An upload lives under ``uploads/{tenant}/{user}/`` until a message attaches it (``shared.attachments.uploads``): the
prefix the bucket's lifecycle rule expires.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from urllib.parse import quote

from shared.attachments.parts import PendingPart
from shared.errors import InvalidRequest
from shared.models import Identity, Message
from shared.ports.attachments import AttachmentStore
from shared.profiles import ExecutionProfile
from shared.url_safety import check_url


def _seg(value: str) -> str:
    return quote(value, safe="")


def user_prefix(tenant_id: str, user_id: str) -> str:
    return f"{_seg(tenant_id)}/{_seg(user_id)}/"


def thread_prefix(tenant_id: str, user_id: str, thread_id: str) -> str:
    return f"{user_prefix(tenant_id, user_id)}{_seg(thread_id)}/"


def part_key(caller: Identity, thread_id: str, message_id: str, index: int, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()[:16]
    return f"{thread_prefix(caller.tenant_id, caller.user_id, thread_id)}{_seg(message_id)}/{index}-{digest}"


async def check_parts(profile: ExecutionProfile, pending: Sequence[PendingPart]) -> None:
    """Refuse what the profile's model cannot take (``unsupported_modality``) and every unsafe URL source
    (``unsafe_url``): all before anything is stored."""
    takes = set(profile.model.input_modalities)
    for item in pending:
        part = item.part
        if part.kind != "document" and part.kind not in takes:
            raise InvalidRequest(
                f"the model of this profile does not take {part.kind} input",
                code="unsupported_modality",
                details=[{"loc": list(item.loc), "msg": f"{part.kind} not supported", "type": "value_error"}],
            )
        if part.url is not None:
            if not profile.model.url_sources:
                raise InvalidRequest(
                    "URL sources are not accepted by this profile; send the bytes",
                    code="unsafe_url",
                    details=[{"loc": [*item.loc, "source"], "msg": "url sources off", "type": "value_error"}],
                )
            if part.kind == "document":
                raise InvalidRequest(
                    "a document must be sent as bytes: its text is read by the server, which never fetches a URL",
                    code="unsafe_url",
                    details=[{"loc": [*item.loc, "source"], "msg": "document url", "type": "value_error"}],
                )
            # The same check as every outgoing URL (shared.url_safety); never loopback for a client's source.
            field = ".".join(str(step) for step in [*item.loc, "source", "value"])
            await check_url(part.url, allow_loopback=False, field=field)


async def store_parts(
    store: AttachmentStore, caller: Identity, messages: Sequence[Message], pending: dict[str, tuple[PendingPart, ...]]
) -> list[Message]:
    """``messages`` with their parts, each inline part's bytes stored first and referred to by its key."""
    out: list[Message] = []
    for msg in messages:
        items = pending.get(msg.id, ())
        if not items:
            out.append(msg)
            continue
        parts = []
        for index, item in enumerate(items):
            if item.data is None:
                parts.append(item.part)
                continue
            key = part_key(caller, msg.thread_id, msg.id, index, item.data)
            await store.put(key, item.data, item.part.mime_type)
            parts.append(item.part.model_copy(update={"key": key}))
        out.append(msg.model_copy(update={"parts": tuple(parts)}))
    return out
