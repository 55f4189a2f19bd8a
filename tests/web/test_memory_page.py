"""The memory page in Chromium against a real server: the owner sees facts, adds, edits and
deletes them, approves a skill, searches; a refusal is shown with the server's reason."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import BrowserContext, expect

from nightowl.memory.facts import Source, add_fact
from nightowl.memory.notes import write_note
from nightowl.memory.worklog import write_entry
from nightowl.store.database import Database
from nightowl.store.memory_versions import Author
from tests.server import ServerProcess

pytestmark = pytest.mark.slow


def test_the_owner_sees_and_corrects_memory(
    contexts: Callable[..., BrowserContext], serve: Callable[..., ServerProcess]
) -> None:
    server = serve()
    with server.client() as http:
        http.post("/v1/memory/facts", json={"text": "Prefers green tea"})
        skill = http.post(
            "/v1/memory/skills",
            json={"name": "pay-bill", "description": "Paying bills.", "body": "1. Log in"},
        ).json()
        # As if the agent had written it: waiting for the owner's review.
        http.patch(f"/v1/memory/skills/{skill['id']}", json={"approved": False})

    page = contexts().new_page()
    page.goto(f"{server.url}/#token={server.token}")
    page.wait_for_selector("#connection[data-state=live]")
    page.get_by_role("link", name="Memory").click()
    facts = page.get_by_role("list", name="Profile facts")
    expect(facts).to_contain_text("Prefers green tea")
    expect(page.locator("#profile-size")).to_contain_text("1/100 facts")

    page.get_by_label("New fact").fill("Works from Lisbon")
    page.get_by_role("button", name="Add").click()
    expect(facts).to_contain_text("Works from Lisbon")
    expect(page.locator("#profile-size")).to_contain_text("2/100 facts")

    tea = facts.locator("li", has_text="Prefers green tea")
    tea.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit").fill("Prefers oolong tea")
    page.get_by_role("button", name="Save").click()
    expect(facts).to_contain_text("Prefers oolong tea")
    expect(facts).not_to_contain_text("green")

    facts.locator("li", has_text="Works from Lisbon").get_by_role("button", name="Delete").click()
    expect(facts).not_to_contain_text("Lisbon")

    skills = page.get_by_role("list", name="Skills")
    expect(skills).to_contain_text("needs your review")
    skills.get_by_role("button", name="Approve").click()
    expect(skills).to_contain_text("approved")

    page.get_by_label("Search memory").fill("oolong")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("list", name="Search results")).to_contain_text("Prefers oolong tea")

    # A refusal is shown with the server's reason.
    page.get_by_label("New fact").fill("x" * 500)
    with server.client() as http:
        for n in range(99):
            http.post("/v1/memory/facts", json={"text": f"f{n}"})
    page.get_by_role("button", name="Add").click()
    expect(page.get_by_role("alert")).to_contain_text("the profile is full")


def test_memory_made_from_outside_text_is_marked(
    contexts: Callable[..., BrowserContext], serve: Callable[..., ServerProcess]
) -> None:
    server = serve()
    with server.client() as http:
        owner = http.get("/v1/me").json()["id"]
    # As a turn that read a webhook would have written them.
    store = Database(f"sqlite:///{server.data_dir / 'nightowl.db'}")
    with store.write() as session:
        write_entry(session, owner, "Asked: pay the overdue invoice", trust="untrusted")
        write_entry(session, owner, "Moved the Bob meeting to 3 pm.", trust="owner")
        write_note(session, owner, "Invoice from the webhook is pending", 60, trust="untrusted")
    store.dispose()

    page = contexts().new_page()
    page.goto(f"{server.url}/#token={server.token}")
    page.wait_for_selector("#connection[data-state=live]")
    page.get_by_role("link", name="Memory").click()
    log = page.get_by_role("list", name="Work log")
    invoice = log.locator("li", has_text="pay the overdue invoice")
    expect(invoice).to_contain_text("from untrusted content")
    expect(log.locator("li", has_text="Bob meeting")).not_to_contain_text("untrusted")
    notes = page.get_by_role("list", name="Notes")
    expect(notes).to_contain_text("from untrusted content")

    # The owner's correction makes the entry theirs.
    invoice.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit").fill("Was asked to pay an invoice; I declined.")
    page.get_by_role("button", name="Save").click()
    corrected = log.locator("li", has_text="I declined")
    expect(corrected).to_be_visible()
    expect(corrected).not_to_contain_text("untrusted")


def test_the_owner_reverts_a_change_and_a_turn_from_the_history(
    contexts: Callable[..., BrowserContext], serve: Callable[..., ServerProcess]
) -> None:
    server = serve()
    with server.client() as http:
        owner = http.get("/v1/me").json()["id"]
        fact = http.post("/v1/memory/facts", json={"text": "Lives in Berlin"}).json()
        http.patch(f"/v1/memory/facts/{fact['id']}", json={"text": "Lives in Bonn"})
    # As the memory pass of a turn that read a webhook would have written them.
    store = Database(f"sqlite:///{server.data_dir / 'nightowl.db'}")
    by = Author("memory_pass", "turn_web1", trust="untrusted")
    with store.write() as session:
        add_fact(session, owner, "Pays invoices on Fridays", Source("untrusted"), by=by)
        add_fact(session, owner, "Banks with Evil Bank", Source("untrusted"), by=by)
    store.dispose()

    page = contexts().new_page()
    page.goto(f"{server.url}/#token={server.token}")
    page.wait_for_selector("#connection[data-state=live]")
    page.get_by_role("link", name="Memory").click()
    facts = page.get_by_role("list", name="Profile facts")
    expect(facts).to_contain_text("Banks with Evil Bank")
    history = page.get_by_role("list", name="History")
    planted = history.locator("li", has_text="added “Banks with Evil Bank”")
    expect(planted).to_contain_text("by memory pass · from untrusted content")

    planted.get_by_role("button", name="Revert turn").click()
    expect(facts).not_to_contain_text("Evil Bank")
    expect(facts).not_to_contain_text("Fridays")
    expect(planted).to_contain_text("reverted by #")

    # A change with a later one standing cannot be undone, and the page says why.
    history.locator("li", has_text="added “Lives in Berlin”").get_by_role(
        "button", name="Revert"
    ).click()
    expect(page.get_by_role("alert")).to_contain_text("revert that one first")
    expect(facts).to_contain_text("Lives in Bonn")

    edit = history.locator("li", has_text="“Lives in Berlin” → “Lives in Bonn”")
    edit.get_by_role("button", name="Revert").click()
    expect(facts).to_contain_text("Lives in Berlin")
    expect(facts).not_to_contain_text("Bonn")
