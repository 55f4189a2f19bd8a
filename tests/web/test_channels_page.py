"""The channels page in Chromium at phone width against a real server and a real mail system
(pymap IMAP, aiosmtpd SMTP on 127.0.0.1): the owner adds an e-mail channel through the form
(the password goes to the vault, the settings only name it), sees the server's refusal of a
bad address, watches the channel come up, tests it and removes it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, ViewportSize, expect

from tests.channels.servers import MailServer, ensure_installed
from tests.server import ServerProcess
from tests.web.conftest import ARTIFACTS

pytestmark = pytest.mark.slow

BOT = "bot@example.test"
OWNER = "owner@example.test"
BOT_PASSWORD = "bot-mail-password-0123456789"
SECRET = "CHANNEL_MAIL_PASSWORD"
PHONE: ViewportSize = {"width": 360, "height": 800}
DESKTOP: ViewportSize = {"width": 1280, "height": 800}


@pytest.fixture(scope="module", autouse=True)
def _servers_installed() -> None:
    ensure_installed()


@pytest.fixture
def mailserver(tmp_path: Path) -> Iterator[MailServer]:
    server = MailServer(tmp_path / "mail", {"bot": BOT_PASSWORD, "owner": "o" * 20}).start()
    try:
        yield server
    finally:
        server.stop()


def fill_in_the_mail_channel(page: Page, mailserver: MailServer, address: str) -> None:
    """The form as the owner fills it for the test mail system (no TLS, no SMTP login; the
    owner's mail unsigned, so DKIM is off: the less common settings go in the JSON box)."""
    page.get_by_label("Name", exact=True).fill("mail")
    page.get_by_label("Kind", exact=True).select_option("email")
    mail = page.get_by_role("group", name="E-mail settings")
    mail.get_by_label("Address", exact=True).fill(address)
    mail.get_by_label("Owner", exact=True).fill(OWNER)
    mail.get_by_label("Username", exact=True).fill("bot")
    mail.get_by_label("IMAP host", exact=True).fill("127.0.0.1")
    mail.get_by_label("IMAP port", exact=True).fill(str(mailserver.imap_port))
    mail.get_by_label("IMAP security", exact=True).select_option("none")
    mail.get_by_label("SMTP host", exact=True).fill("127.0.0.1")
    mail.get_by_label("SMTP port", exact=True).fill(str(mailserver.smtp_port))
    mail.get_by_label("SMTP security", exact=True).select_option("none")
    page.get_by_label("Password", exact=True).fill(BOT_PASSWORD)
    advanced = page.get_by_label("Advanced settings (JSON)")
    if not advanced.is_visible():
        page.get_by_text("Advanced settings (JSON)").click()
    advanced.fill(json.dumps({"smtp_auth": False, "idle_s": 1, "owner_dkim": False}))


def fits_the_screen(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def test_the_owner_adds_tests_and_removes_an_email_channel(
    contexts: Callable[..., BrowserContext],
    serve: Callable[..., ServerProcess],
    mailserver: MailServer,
) -> None:
    server = serve(env={"NIGHTOWL_CHANNEL_RELOAD_S": "0.2"})
    page = contexts().new_page()
    page.goto(f"{server.url}/#token={server.token}")
    page.wait_for_selector("#connection[data-state=live]", state="attached")
    page.get_by_role("link", name="Channels").click()
    page.set_viewport_size(PHONE)  # the rest on a phone
    listed = page.get_by_role("list", name="Channels")
    expect(listed).to_contain_text("No channels yet.")
    # Each kind asks for its own settings and names its credential.
    page.get_by_label("Kind", exact=True).select_option("matrix")
    expect(page.get_by_role("group", name="Matrix settings")).to_be_visible()
    expect(page.get_by_role("group", name="E-mail settings")).to_be_hidden()
    expect(page.get_by_label("Access token", exact=True)).to_be_visible()
    page.get_by_label("Name", exact=True).fill("chat")
    expect(page.locator("#credential-name")).to_have_text("CHANNEL_CHAT_TOKEN")

    refused = page.locator("#add-error")
    added = page.locator("#add-done")

    # An address without @: the server's reason shows by the form, and the password the
    # form had stored for it is taken back.
    fill_in_the_mail_channel(page, mailserver, "bot.example.test")
    page.get_by_role("button", name="Add", exact=True).click()
    expect(refused).to_contain_text("set address to the channel's own e-mail address")
    expect(refused).to_contain_text("Nothing was saved.")
    with server.client() as http:
        assert http.get("/v1/channels").json() == []
        assert http.get("/v1/secrets").json() == []

    page.get_by_role("group", name="E-mail settings").get_by_label("Address", exact=True).fill(BOT)
    page.get_by_role("button", name="Add", exact=True).click()
    expect(added).to_contain_text(
        f"Added mail: it connects within a few seconds. Its password is in the vault as {SECRET}."
    )
    expect(refused).to_be_hidden()
    item = listed.locator("li[data-name=mail]")
    expect(item).to_contain_text("e-mail · bot@example.test · ok", timeout=30_000)
    expect(item).to_contain_text("deliveries: 0 sent · 0 pending · 0 failed")
    assert fits_the_screen(page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "channels-phone.png"), full_page=True)

    # The vault holds the password; the channel's settings name it and hold no credential;
    # numbers and flags arrived as numbers and flags.
    with server.client() as http:
        assert [s["name"] for s in http.get("/v1/secrets").json()] == [SECRET]
        channels = http.get("/v1/channels")
        assert BOT_PASSWORD not in channels.text
        (channel,) = channels.json()
        assert channel["kind"] == "email"
        assert channel["status"] == "ok"
        assert channel["settings"] == {
            "address": BOT,
            "owner": OWNER,
            "username": "bot",
            "imap_host": "127.0.0.1",
            "imap_port": mailserver.imap_port,
            "imap_security": "none",
            "smtp_host": "127.0.0.1",
            "smtp_port": mailserver.smtp_port,
            "smtp_security": "none",
            "smtp_auth": False,
            "idle_s": 1,
            "owner_dkim": False,
            "password_secret": SECRET,
        }
    assert BOT_PASSWORD not in page.content()
    assert BOT_PASSWORD not in server.log_path.read_text()

    page.set_viewport_size(DESKTOP)
    page.screenshot(path=str(ARTIFACTS / "channels-desktop.png"), full_page=True)
    page.set_viewport_size(PHONE)

    item.get_by_role("button", name="Test", exact=True).click()
    expect(item.get_by_role("status")).to_contain_text(
        re.compile(
            r"Works: IMAP bot@127\.0\.0\.1:\d+ \(INBOX: \d+ mails\), SMTP 127\.0\.0\.1:\d+ ok"
        )
    )

    # Remove asks first; Cancel keeps the channel.
    item.get_by_role("button", name="Remove", exact=True).click()
    expect(item).to_contain_text("Remove mail? Its conversations stay.")
    item.get_by_role("button", name="Cancel", exact=True).click()
    expect(item.get_by_role("button", name="Remove", exact=True)).to_be_focused()
    item.get_by_role("button", name="Remove", exact=True).click()
    item.get_by_role("button", name="Yes, remove", exact=True).click()
    expect(listed).to_contain_text("No channels yet.")
    with server.client() as http:
        assert http.get("/v1/channels").json() == []
