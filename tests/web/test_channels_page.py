"""The channels page in Chromium at phone width against a real server and a real mail system
(pymap IMAP, aiosmtpd SMTP on 127.0.0.1): the owner adds an e-mail channel through the form
(the password goes to the vault, the settings only name it), sees the server's refusal of a
bad address, watches the channel come up, tests it and removes it. Telegram and Slack channels
are added the same way against the suite's stand-ins of their APIs (tests/channels/
telegram_api.py, slack_api.py: the real services cannot be reached from here), with the form's
own refusals, the server's, and every secret a refused attempt made taken back."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, ViewportSize, expect

from nightowl.safety.vault import load_key, open_sealed
from tests.channels.servers import MailServer, ensure_installed
from tests.channels.slack_api import OWNER as SLACK_OWNER
from tests.channels.slack_api import SlackStandIn
from tests.channels.telegram_standin import OWNER_ID, TelegramStandIn
from tests.e2e.store_view import rows
from tests.server import ServerProcess
from tests.web.conftest import ARTIFACTS

pytestmark = pytest.mark.slow

BOT = "bot@example.test"
OWNER = "owner@example.test"
BOT_PASSWORD = "bot-mail-password-0123456789"
SECRET = "CHANNEL_MAIL_PASSWORD"
PHONE: ViewportSize = {"width": 360, "height": 800}
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
TELEGRAM_TOKEN = "7000001:AAH-test-token"


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


@pytest.fixture
def telegram(tmp_path: Path) -> Iterator[TelegramStandIn]:
    api = TelegramStandIn(tmp_path / "telegram", TELEGRAM_TOKEN).start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    stand_in = SlackStandIn().start()
    try:
        yield stand_in
    finally:
        stand_in.stop()


def vault(server: ServerProcess) -> dict[str, str]:
    """The server's vault read straight from its store and opened with its key: what the page
    stored, under which names."""
    url = server.env.get("NIGHTOWL_DATABASE_URL") or f"sqlite:///{server.data_dir / 'nightowl.db'}"
    sealed = rows(url, "SELECT name, ciphertext FROM secrets")
    return open_sealed(load_key(server.data_dir), [(str(n), str(c)) for n, c in sealed])


def channels_page(contexts: Callable[..., BrowserContext], server: ServerProcess) -> Page:
    """The owner signed in, on the channels page (then at phone width)."""
    page = contexts().new_page()
    page.goto(f"{server.url}/#token={server.token}")
    page.wait_for_selector("#connection[data-state=live]", state="attached")
    page.get_by_role("link", name="Channels").click()
    page.set_viewport_size(PHONE)
    expect(page.get_by_role("list", name="Channels")).to_contain_text("No channels yet.")
    return page


def advanced(page: Page, settings: dict[str, object]) -> None:
    box = page.get_by_label("Advanced settings (JSON)")
    if not box.is_visible():
        page.get_by_text("Advanced settings (JSON)").click()
    box.fill(json.dumps(settings))


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


def test_the_owner_adds_a_telegram_channel_whose_token_only_the_vault_holds(
    contexts: Callable[..., BrowserContext],
    serve: Callable[..., ServerProcess],
    telegram: TelegramStandIn,
) -> None:
    server = serve(env={"NIGHTOWL_CHANNEL_RELOAD_S": "0.2"})
    page = channels_page(contexts, server)
    refused = page.locator("#add-error")
    added = page.locator("#add-done")
    add = page.get_by_role("button", name="Add", exact=True)
    credentials = page.locator("#credentials")

    page.get_by_label("Name", exact=True).fill("tg")
    page.get_by_label("Kind", exact=True).select_option("telegram")
    settings = page.get_by_role("group", name="Telegram settings")
    expect(settings).to_be_visible()
    expect(page.get_by_role("group", name="E-mail settings")).to_be_hidden()
    bot_token = page.get_by_label("Bot token", exact=True)
    hook_token = page.get_by_label("Webhook secret token", exact=True)
    expect(bot_token).to_be_visible()
    expect(credentials).to_contain_text("Bot token: kept in the vault as CHANNEL_TG_BOT_TOKEN")
    # Long polling asks for neither a webhook URL nor its secret token; a webhook does.
    expect(hook_token).to_be_hidden()
    expect(settings.get_by_label("Webhook URL", exact=True)).to_be_hidden()
    settings.get_by_label("Mode", exact=True).select_option("webhook")
    expect(settings.get_by_label("Webhook URL", exact=True)).to_be_visible()
    expect(hook_token).to_be_visible()
    expect(credentials).to_contain_text(
        "Webhook secret token: kept in the vault as CHANNEL_TG_WEBHOOK_SECRET"
    )
    settings.get_by_label("Owner", exact=True).fill(str(OWNER_ID))
    bot_token.fill(TELEGRAM_TOKEN)
    add.click()
    expect(refused).to_have_text(
        "Give the webhook secret token, or name a vault secret as webhook_secret_secret "
        "(advanced settings)"
    )
    hook_token.fill("not a token!")
    add.click()
    expect(refused).to_have_text("Webhook secret token: 1-256 letters, digits, '_' or '-'")
    with server.client() as http:  # the form's own refusals touch nothing
        assert http.get("/v1/secrets").json() == []
        assert http.get("/v1/channels").json() == []

    # Back to long polling (what was typed for the webhook is not sent), with alerts.
    settings.get_by_label("Mode", exact=True).select_option("polling")
    expect(hook_token).to_be_hidden()
    settings.get_by_label("Alerts").check()
    advanced(page, {"api_url": telegram.url, "poll_timeout_s": 1})
    add.click()
    expect(added).to_have_text(
        "Added tg: it connects within a few seconds. "
        "Its bot token is in the vault as CHANNEL_TG_BOT_TOKEN."
    )
    expect(refused).to_be_hidden()
    item = page.get_by_role("list", name="Channels").locator("li[data-name=tg]")
    expect(item).to_contain_text(
        f"Telegram · owner {OWNER_ID} · long polling · alerts · ok", timeout=30_000
    )
    assert fits_the_screen(page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "channels-telegram-phone.png"), full_page=True)

    # The vault holds the token under the name the page showed; the settings only name it.
    assert vault(server) == {"CHANNEL_TG_BOT_TOKEN": TELEGRAM_TOKEN}
    with server.client() as http:
        channels = http.get("/v1/channels")
        assert TELEGRAM_TOKEN not in channels.text
        (channel,) = channels.json()
        assert channel["kind"] == "telegram"
        assert channel["status"] == "ok"
        assert channel["settings"] == {
            "owner": str(OWNER_ID),
            "mode": "polling",
            "alerts": True,
            "api_url": telegram.url,
            "poll_timeout_s": 1,
            "bot_token_secret": "CHANNEL_TG_BOT_TOKEN",
        }
    assert TELEGRAM_TOKEN not in page.content()
    assert TELEGRAM_TOKEN not in server.log_path.read_text()

    # The stand-in answers only its own token: the test reaching the bot shows the vault's
    # token is the one typed.
    item.get_by_role("button", name="Test", exact=True).click()
    expect(item.get_by_role("status")).to_have_text(
        re.compile(
            r"Works: Telegram bot @nightowl_test_bot \(id \d+\) at http://127\.0\.0\.1:\d+ ok; "
            r"no webhook: updates come by long polling"
        )
    )

    # A second bot channel by webhook: its secret token goes to the vault too, and the list
    # shows the URL to give Telegram.
    page.get_by_label("Name", exact=True).fill("hook")
    page.get_by_label("Kind", exact=True).select_option("telegram")
    settings.get_by_label("Owner", exact=True).fill(str(OWNER_ID))
    settings.get_by_label("Mode", exact=True).select_option("webhook")
    bot_token.fill(TELEGRAM_TOKEN)
    hook_token.fill("hook-token_0123456789")
    advanced(page, {"api_url": telegram.url})
    add.click()
    expect(added).to_contain_text(
        "Added hook: it connects within a few seconds. Its bot token is in the vault as "
        "CHANNEL_HOOK_BOT_TOKEN, its webhook secret token as CHANNEL_HOOK_WEBHOOK_SECRET. "
        "Webhook URL for Telegram (setWebhook, with the secret token): "
    )
    hook = page.get_by_role("list", name="Channels").locator("li[data-name=hook]")
    expect(hook).to_contain_text(f"Telegram · owner {OWNER_ID} · webhook · ok", timeout=30_000)
    with server.client() as http:
        (channel,) = [c for c in http.get("/v1/channels").json() if c["name"] == "hook"]
    assert channel["settings"] == {
        "owner": str(OWNER_ID),
        "mode": "webhook",
        "alerts": False,
        "api_url": telegram.url,
        "bot_token_secret": "CHANNEL_HOOK_BOT_TOKEN",
        "webhook_secret_secret": "CHANNEL_HOOK_WEBHOOK_SECRET",
    }
    assert "/v1/ingress/" in channel["ingress_url"]
    expect(hook).to_contain_text(
        f"Webhook URL for Telegram (setWebhook, with the secret token): {channel['ingress_url']}"
    )
    assert vault(server) == {
        "CHANNEL_TG_BOT_TOKEN": TELEGRAM_TOKEN,
        "CHANNEL_HOOK_BOT_TOKEN": TELEGRAM_TOKEN,
        "CHANNEL_HOOK_WEBHOOK_SECRET": "hook-token_0123456789",
    }
    assert "hook-token_0123456789" not in page.content()
    assert "hook-token_0123456789" not in server.log_path.read_text()
    assert fits_the_screen(page)


def test_a_refused_slack_channel_takes_back_the_secrets_it_made_and_a_good_one_comes_up(
    contexts: Callable[..., BrowserContext],
    serve: Callable[..., ServerProcess],
    slack: SlackStandIn,
) -> None:
    server = serve(env={"NIGHTOWL_CHANNEL_RELOAD_S": "0.2"})
    with server.client() as http:  # the owner had stored a secret by that name before
        stored = http.put("/v1/secrets/CHANNEL_TEAM_BOT_TOKEN", json={"value": "xoxb-old"})
        assert stored.status_code == 204
    page = channels_page(contexts, server)
    refused = page.locator("#add-error")
    added = page.locator("#add-done")
    add = page.get_by_role("button", name="Add", exact=True)
    credentials = page.locator("#credentials")

    page.get_by_label("Name", exact=True).fill("team")
    page.get_by_label("Kind", exact=True).select_option("slack")
    settings = page.get_by_role("group", name="Slack settings")
    expect(settings).to_be_visible()
    bot_token = page.get_by_label("Bot token", exact=True)
    app_token = page.get_by_label("App-level token", exact=True)
    signing_secret = page.get_by_label("Signing secret", exact=True)
    # Socket Mode (the default) asks for the app-level token, not the signing secret.
    expect(bot_token).to_be_visible()
    expect(app_token).to_be_visible()
    expect(signing_secret).to_be_hidden()
    expect(credentials).to_contain_text("Bot token: kept in the vault as CHANNEL_TEAM_BOT_TOKEN")
    expect(credentials).to_contain_text(
        "App-level token: kept in the vault as CHANNEL_TEAM_APP_TOKEN"
    )

    # Socket Mode without its token: the form says what is missing and stores nothing.
    settings.get_by_label("Owner", exact=True).fill("alice")
    bot_token.fill(slack.bot_token)
    add.click()
    expect(refused).to_have_text(
        "Give the app-level token, or name a vault secret as app_token_secret (advanced settings)"
    )
    assert vault(server) == {"CHANNEL_TEAM_BOT_TOKEN": "xoxb-old"}

    # Both ways, but an owner that is no member id: the server's reason shows, the two
    # secrets the attempt made are deleted again, the one there before stays (new value).
    settings.get_by_label("Mode", exact=True).select_option("both")
    expect(signing_secret).to_be_visible()
    expect(credentials).to_contain_text(
        "Signing secret: kept in the vault as CHANNEL_TEAM_SIGNING_SECRET"
    )
    app_token.fill(slack.app_token)
    signing_secret.fill(slack.signing_secret)
    advanced(page, {"api_url": slack.api_url})
    add.click()
    expect(refused).to_have_text(
        "Not added: set owner to your Slack member id (U…: your profile → ⋮ → Copy member "
        "ID). The bot token was stored in the vault as CHANNEL_TEAM_BOT_TOKEN (a secret of "
        "that name was there before: it keeps the new value). Nothing else was saved."
    )
    assert vault(server) == {"CHANNEL_TEAM_BOT_TOKEN": slack.bot_token}
    with server.client() as http:
        assert http.get("/v1/channels").json() == []

    # Two owners, as for the other kinds: added, and up over Socket Mode.
    settings.get_by_label("Owner", exact=True).fill(f"{SLACK_OWNER}, U0SECOND")
    add.click()
    expect(added).to_contain_text(
        "Added team: it connects within a few seconds. Its bot token is in the vault as "
        "CHANNEL_TEAM_BOT_TOKEN, its app-level token as CHANNEL_TEAM_APP_TOKEN, its signing "
        "secret as CHANNEL_TEAM_SIGNING_SECRET. Request URL for Slack (Event Subscriptions, "
        "Interactivity): "
    )
    item = page.get_by_role("list", name="Channels").locator("li[data-name=team]")
    expect(item).to_contain_text(
        f"Slack · owner {SLACK_OWNER}, U0SECOND · Socket Mode + Events API · ok", timeout=30_000
    )
    assert vault(server) == {
        "CHANNEL_TEAM_BOT_TOKEN": slack.bot_token,
        "CHANNEL_TEAM_APP_TOKEN": slack.app_token,
        "CHANNEL_TEAM_SIGNING_SECRET": slack.signing_secret,
    }
    with server.client() as http:
        channels = http.get("/v1/channels")
        (channel,) = channels.json()
        assert channel["kind"] == "slack"
        assert channel["settings"] == {
            "owner": [SLACK_OWNER, "U0SECOND"],
            "api_url": slack.api_url,
            "bot_token_secret": "CHANNEL_TEAM_BOT_TOKEN",
            "app_token_secret": "CHANNEL_TEAM_APP_TOKEN",
            "signing_secret_secret": "CHANNEL_TEAM_SIGNING_SECRET",
        }
    ingress = channel["ingress_url"]
    assert "/v1/ingress/" in ingress
    expect(added).to_contain_text(ingress)
    expect(item).to_contain_text(
        f"Request URL for Slack (Event Subscriptions, Interactivity): {ingress}"
    )
    assert fits_the_screen(page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "channels-slack-phone.png"), full_page=True)
    for credential in (slack.bot_token, slack.app_token, slack.signing_secret):
        assert credential not in channels.text
        assert credential not in page.content()
        assert credential not in server.log_path.read_text()

    item.get_by_role("button", name="Test", exact=True).click()
    expect(item.get_by_role("status")).to_have_text(
        "Works: Slack Nightowl Test as nightowl (U0BOT) ok; Socket Mode ok"
    )
    assert slack.sockets() == 1
