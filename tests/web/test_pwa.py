"""The installable app: a manifest with icons, a service worker that keeps the app shell, and
a start with the server stopped that shows what the app had."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from nightowl.channels.webpush import payload_of
from nightowl.store.push import DuePush
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


def test_a_push_from_the_server_shows_a_notification_that_leads_to_its_item(
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    """The service worker's side of Web Push, with the server's own payload. A push service
    cannot be reached here (Chromium subscribes at Google's), so the push is handed to the
    worker by the browser itself (DevTools' ServiceWorker.deliverPushMessage), as Chromium
    does once it has decrypted one; the server side is tested against a stand-in push service
    (tests/channels/test_webpush.py)."""
    server = serve()
    conversation = start_conversation(server)
    context = contexts(viewport={"width": 390, "height": 844})
    context.grant_permissions(["notifications"], origin=server.url)
    page = open_app(context, server, conversation)
    page.wait_for_function("async () => (await navigator.serviceWorker.ready).active !== null")

    registrations: list[dict[str, Any]] = []
    devtools = context.new_cdp_session(page)
    devtools.on(
        "ServiceWorker.workerRegistrationUpdated",
        lambda event: registrations.extend(event["registrations"]),
    )
    devtools.send("ServiceWorker.enable")
    scope = f"{server.url}/"
    for _ in range(150):  # Playwright hands events over while it waits (not in time.sleep)
        if any(r["scopeURL"] == scope and not r["isDeleted"] for r in registrations):
            break
        page.wait_for_timeout(100)
    registration = next(r for r in registrations if r["scopeURL"] == scope)

    due = DuePush(
        key="k1",
        message_id="m-approve-1",
        user_id="owner",
        urgent=True,
        attempts=0,
        subscription=None,  # type: ignore[arg-type]  # not read by payload_of
        conversation_id=conversation,
        conversation_title="Pay the Acme invoice",
        body="Pay 120 EUR to Acme?",
        kind="approval",
    )
    payload = payload_of(due, include_text=False)
    devtools.send(
        "ServiceWorker.deliverPushMessage",
        {
            "origin": server.url,
            "registrationId": registration["registrationId"],
            "data": json.dumps(payload),
        },
    )
    shown = None
    for _ in range(150):
        shown = page.evaluate(
            """async () => {
                const all = await (await navigator.serviceWorker.ready).getNotifications();
                return all.map((n) => ({
                    title: n.title, body: n.body, tag: n.tag, url: n.data && n.data.url,
                    requireInteraction: n.requireInteraction,
                }));
            }"""
        )
        if shown:
            break
        page.wait_for_timeout(100)
    assert shown == [
        {
            "title": "nightowl needs your approval",
            "body": "Pay the Acme invoice",  # the title only: no message text by default
            "tag": "m-approve-1",
            "url": f"/#c={conversation}&m=m-approve-1",
            "requireInteraction": True,
        }
    ]
