"""The installable app: a manifest with icons, a service worker that keeps the app shell, and
a start with the server stopped that shows what the app had."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from tests.server import ServerProcess
from tests.web.conftest import open_app, start_conversation

pytestmark = pytest.mark.slow


def test_the_app_is_installable_and_opens_offline_with_what_it_had(
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    server = serve()
    manifest = httpx.get(f"{server.url}/manifest.webmanifest")
    assert manifest.status_code == 200
    assert manifest.headers["content-type"].startswith("application/manifest+json")
    sizes = {icon["sizes"] for icon in manifest.json()["icons"]}
    assert {"192x192", "512x512"} <= sizes and manifest.json()["display"] == "standalone"
    for icon in manifest.json()["icons"]:
        assert httpx.get(f"{server.url}{icon['src']}").status_code == 200

    conversation = start_conversation(server)
    with server.client() as http:
        sent = http.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": "m1", "text": "Remember the blue notebook"},
        )
        assert sent.status_code == 201
    context = contexts(viewport={"width": 390, "height": 844})
    page = open_app(context, server, conversation)
    expect(page.locator("li.msg.own", has_text="blue notebook")).to_be_visible()
    # The service worker is registered, active, controls the page and holds the shell.
    page.wait_for_function("async () => (await navigator.serviceWorker.ready).active !== null")
    page.wait_for_function("() => navigator.serviceWorker.controller !== null")
    page.wait_for_function(
        "async () => (await (await caches.open('nightowl-shell-v1')).keys()).length >= 10"
    )
    page.reload()  # this load, under the worker's control, keeps the lists it fetched
    expect(page.locator("li.msg.own", has_text="blue notebook")).to_be_visible()
    page.wait_for_function(
        "async () => (await (await caches.open('nightowl-data-v1')).keys()).length >= 2"
    )

    server.stop()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.url}/healthz", timeout=2)
    page.reload()
    expect(page.locator("#app")).to_be_visible()
    expect(page.locator("#connection")).to_have_attribute("data-state", "reconnecting")
    expect(page.locator("#conversation-title")).to_have_text("Remember the blue notebook")
    expect(page.locator("li.msg.own", has_text="blue notebook")).to_be_visible()

    # A new window, the server still down: the shell opens from the cache too.
    fresh = context.new_page()
    fresh.goto(f"{server.url}/")
    expect(fresh.locator("#app")).to_be_visible()
    expect(fresh.locator(".conversation-item .sub", has_text="blue notebook")).to_be_visible()
