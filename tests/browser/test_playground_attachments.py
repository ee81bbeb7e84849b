"""The playground's attach button in headless chromium (issue 43, point 7): an attached image is sent as an inline
AG-UI ``image`` part and reaches the model as an ``image_url`` part, the conversation shows its thumbnail (the
history's part URL, fetched with the page's token), and a file that is not what its name says is refused with its
422 code in the page's error area, the message marked as not sent."""

from __future__ import annotations

import base64
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest

from tests.browser.test_playground_threads import api_get, send_and_wait
from tests.support.images import png
from tests.support.model_server import ModelServer, ScriptedTurn

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

Serve = Callable[..., AbstractContextManager[str]]


def attach(view: Any, name: str, mime: str, data: bytes) -> None:
    view.page.locator("[data-testid=attach-input]").set_input_files(
        files=[{"name": name, "mimeType": mime, "buffer": data}]
    )
    view.page.locator("[data-testid=attachment]", has_text=name).wait_for()


def test_an_attached_image_reaches_the_model_shows_as_a_thumbnail_and_a_false_png_is_refused(
    playground: Serve, open_page: Callable[[str], Any]
) -> None:
    image = png(64, 48)
    with ModelServer() as model:
        model.enqueue(ScriptedTurn(text=["A grey rectangle."]))
        with playground(llm_base_url=model.base_url, llm_api_key="k") as url:
            view = open_page(f"{url}/playground")
            # WHEN an image is attached and sent with a question
            attach(view, "grey.png", "image/png", image)
            send_and_wait(view, "What is in this picture?", runs=1)
            thread = str(view.page.locator("[data-testid=thread-id]").text_content())
            # THEN the model got the question and the image as an image_url part of the same bytes
            user = model.requests[-1]["messages"][-1]
            urls = [p["image_url"]["url"] for p in user["content"] if p["type"] == "image_url"]
            assert [base64.b64decode(u.split(",", 1)[1]) for u in urls] == [image]
            assert any(p["type"] == "text" and p["text"].endswith("What is in this picture?") for p in user["content"])
            # AND the conversation shows the thumbnail, read from the history's part URL with the page's token
            thumb = view.page.locator(".msg.user [data-testid=part-thumbnail]")
            thumb.wait_for()
            view.page.wait_for_function(
                """() => { const img = document.querySelector('.msg.user [data-testid=part-thumbnail]');
                           return img && img.src.startsWith('blob:') && img.complete && img.naturalWidth > 0; }"""
            )
            assert view.page.evaluate(
                "() => { const i = document.querySelector('.msg.user [data-testid=part-thumbnail]');"
                " return [i.naturalWidth, i.naturalHeight]; }"
            ) == [64, 48]
            assert thumb.get_attribute("alt") == "grey.png, 64x48"
            [stored] = api_get(view, f"/api/v1/threads/{thread}/history")["items"][0]["parts"]
            assert (stored["type"], stored["filename"], stored["width"], stored["height"]) == (
                "image",
                "grey.png",
                64,
                48,
            )
            # AND the attachment list is empty again
            assert view.page.locator("[data-testid=attachment]").count() == 0
            view.screenshot("thumbnail")

            # WHEN a ".png" that holds text is attached and sent
            view.console.expect(r"status of 422")
            attach(view, "notes.png", "image/png", b"these are my notes, not a picture\n")
            sent_before = len(model.requests)
            send_and_wait(view, "And this one?", runs=2)
            # THEN the page shows the refusal with its code and what to do, and the message is marked as not sent
            title = view.page.locator("[data-testid=error-title]")
            title.wait_for()
            assert "422 media_type_mismatch" in str(title.text_content())
            assert "not what its name says" in str(view.page.locator("[data-testid=error-hint]").text_content())
            assert view.page.locator(".msg.user.unsent", has_text="And this one?").count() == 1
            # AND nothing reached the model, and the thread holds only the first exchange
            assert len(model.requests) == sent_before
            items = api_get(view, f"/api/v1/threads/{thread}/history")["items"]
            assert [m["role"] for m in items] == ["user", "assistant"]
            view.screenshot("refused")
