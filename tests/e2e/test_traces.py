"""Traces in a real trace server: a turn of the real server process, with two tool calls, is
exported over OTLP (HTTP, then gRPC) to Arize Phoenix and read back through Phoenix's REST
API: one trace from the router's decision through DBOS's workflow to the turn, its model calls
and tool calls, with the GenAI attributes; no message text unless NIGHTOWL_TRACE_CONTENT is on,
and then a secret a tool echoed is redacted. A turn cut off by a SIGKILL mid tool call and
recovered by the restarted server goes on in the trace it started in."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from tests.databases import fresh_database
from tests.e2e.trace_server import Phoenix, ensure_installed
from tests.safety.helpers import messages
from tests.server import ServerProcess, free_port, say, wait_for, write_script

# One Phoenix for the module: its tests run in one test process.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("phoenix")]

ASK = "look up the release notes, marker-4b1e"  # the owner's message: text a trace must not show
CANARY = "canary-trace-5Zq2-secret-value"  # the owner's secret, which no trace may show
PRICES = {"scripted": {"input": 3.0, "cache_read": 0.3, "cache_write": 3.75, "output": 15.0}}


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    ensure_installed()
    server = Phoenix(tmp_path_factory.mktemp("phoenix")).start()
    yield server
    server.stop()


@pytest.fixture
def echo_page() -> Iterator[tuple[str, list[str]]]:
    """A web page that echoes its `token` query parameter back (a tool's result that carries
    the secret the call sent)."""
    seen: list[str] = []
    app = FastAPI()

    @app.get("/echo")
    def echo(token: str) -> PlainTextResponse:
        seen.append(token)
        return PlainTextResponse(f"your token is {token}; keep it safe")

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 10)
    yield f"http://127.0.0.1:{port}", seen
    server.should_exit = True
    thread.join(timeout=5)


def _serve(folder: Path, url: str, page: str, **env: str) -> tuple[ServerProcess, Path]:
    """A server whose scripted model makes two tool calls (a fetch that sends a secret to a
    page that echoes it, and a read), then ends the turn with a message."""
    script = folder / "script.json"
    fetch = {
        "name": "web_fetch",
        "arguments": {"url": f"{page}/echo?token={{{{secret:API_TOKEN}}}}"},
    }
    model = write_script(
        script,
        [
            {
                "text": "",
                "tool_calls": [fetch, {"name": "load_tools", "arguments": {"query": "mail"}}],
            },
            say("Checked.", final=True),
        ],
    )
    document = json.loads(script.read_text())
    script.write_text(
        json.dumps({**document, "review": {"*": "ALLOW: a read of the owner's page"}})
    )
    settings = {
        "NIGHTOWL_WEB_FETCH_PRIVATE": "true",
        "NIGHTOWL_PRICES": json.dumps(PRICES),
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # the SDK's batch processor reads it: export soon
        **env,
    }
    return ServerProcess(folder / "data", url, model=model, env=settings).start(), script


def _turn(server: ServerProcess) -> str:
    """Store the owner's secret, ask, and wait for the answer; the conversation's id."""
    client = server.client()
    put = client.put(
        "/v1/secrets/API_TOKEN", json={"value": CANARY, "allowed_hosts": ["http://127.0.0.1"]}
    )
    assert put.status_code == 204, put.text
    conversation = str(client.post("/v1/conversations", json={}).json()["id"])
    client.post(f"/v1/conversations/{conversation}/messages", json={"client_id": "m1", "text": ASK})
    wait_for(lambda: any(m["body"] == "Checked." for m in messages(client, conversation)), 60)
    return conversation


def _trace(phoenix: Phoenix, conversation: str) -> list[dict[str, Any]]:
    """Every span of the conversation's turn, once the turn's last tool call is exported."""

    def complete() -> list[dict[str, Any]] | None:
        turns = [
            s
            for s in phoenix.spans(name="invoke_agent turn")
            if s["attributes"].get("gen_ai.conversation.id") == conversation
        ]
        if not turns:
            return None
        spans = phoenix.spans(trace_id=turns[0]["context"]["trace_id"])
        names = {s["name"] for s in spans}
        return spans if {"execute_tool send_to_user", "nightowl.turn"} <= names else None

    return list(wait_for(complete, 60))


def _children(spans: list[dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in spans if s["parent_id"] == parent["context"]["span_id"]]


def _one(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [s for s in spans if s["name"] == name]
    assert len(found) == 1, (name, [s["name"] for s in spans])
    return found[0]


def test_a_turn_is_one_trace_with_model_and_tool_spans_and_no_text(
    tmp_path: Path, backend_url: str, phoenix: Phoenix, echo_page: tuple[str, list[str]]
) -> None:
    page, seen = echo_page
    server, script = _serve(tmp_path, backend_url, page, NIGHTOWL_OTLP_ENDPOINT=phoenix.url)
    try:
        conversation = _turn(server)
        assert seen == [CANARY]  # the fetch ran with the secret
        spans = _trace(phoenix, conversation)
    finally:
        server.stop()
    assert len({s["context"]["trace_id"] for s in spans}) == 1
    # The router's decision starts the trace; DBOS's workflow span and the turn's follow.
    route = _one(spans, "nightowl.route")
    assert route["parent_id"] is None
    assert route["attributes"]["nightowl.trigger.source"] == "api"
    assert route["attributes"]["nightowl.turn.new"] is True
    workflow = _one(spans, "nightowl.turn")
    assert workflow["parent_id"] == route["context"]["span_id"]
    turn = _one(spans, "invoke_agent turn")
    assert turn["parent_id"] == workflow["context"]["span_id"]
    assert turn["attributes"]["nightowl.outcome"] == "done"
    # The turn's children: two model calls, then three tool calls (two, then the answer).
    under_turn = _children(spans, turn)
    chats = [s for s in under_turn if s["name"].startswith("chat ")]
    tools = {s["name"]: s for s in under_turn if s["name"].startswith("execute_tool ")}
    assert len(chats) == 2
    assert set(tools) == {
        "execute_tool web_fetch",
        "execute_tool load_tools",
        "execute_tool send_to_user",
    }
    for chat in chats:
        attributes = chat["attributes"]
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.request.model"] == str(script)
        assert attributes["gen_ai.provider.name"] == "nightowl.scripted"
        assert attributes["gen_ai.usage.input_tokens"] > 0
        assert attributes["gen_ai.usage.output_tokens"] == 8
        assert attributes["gen_ai.usage.cache_read.input_tokens"] == 0
        assert attributes["nightowl.cost_usd"] > 0
        assert attributes["nightowl.purpose"] == "turn"
    reasons = sorted(c["attributes"]["gen_ai.response.finish_reasons"][0] for c in chats)
    assert reasons == ["tool_calls", "tool_calls"]
    fetch = tools["execute_tool web_fetch"]["attributes"]
    assert fetch["gen_ai.tool.name"] == "web_fetch"
    assert fetch["nightowl.tool.effect"] == "read"
    assert fetch["nightowl.tool.outcome"] == "ok"
    assert fetch["nightowl.safety.decision"] == "allowed"
    read = tools["execute_tool load_tools"]["attributes"]
    assert read["nightowl.safety.decision"] == "not gated"
    assert read["nightowl.tool.outcome"] == "ok"
    # The gate's review of the fetch (a DBOS step) happened inside the fetch's span.
    under_fetch = _children(spans, tools["execute_tool web_fetch"])
    assert [s["name"] for s in under_fetch] == ["nightowl.review_action"]
    # DBOS's own steps are in the same trace.
    assert any(s["name"] == "nightowl.take_batch" for s in spans)
    # No message text, no tool arguments or results: names, ids, numbers and outcomes only.
    exported = json.dumps(spans)
    assert "marker-4b1e" not in exported and "release notes" not in exported
    assert "Checked." not in exported and "your token is" not in exported
    assert "gen_ai.tool.call.arguments" not in exported
    assert CANARY not in exported


def test_content_on_exports_text_with_a_tools_secret_redacted_over_grpc(
    tmp_path: Path, phoenix: Phoenix, echo_page: tuple[str, list[str]]
) -> None:
    page, _ = echo_page
    with fresh_database("sqlite", tmp_path) as url:
        server, _ = _serve(
            tmp_path,
            url,
            page,
            NIGHTOWL_OTLP_ENDPOINT=phoenix.grpc_url,
            OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
            NIGHTOWL_TRACE_CONTENT="true",
        )
        try:
            conversation = _turn(server)
            spans = _trace(phoenix, conversation)
        finally:
            server.stop()
    turn = _one(spans, "invoke_agent turn")
    chats = sorted(
        (s for s in _children(spans, turn) if s["name"].startswith("chat ")),
        key=lambda s: s["start_time"],
    )
    # The owner's message went into the first call; the second saw the tools' results.
    first_input = chats[0]["attributes"]["gen_ai.input.messages"]
    assert "marker-4b1e" in first_input
    output = json.loads(chats[0]["attributes"]["gen_ai.output.messages"])
    calls = [p for p in output[0]["parts"] if p["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["web_fetch", "load_tools"]
    # The model's arguments as it wrote them: the secret's reference, never its value.
    fetch = _one(spans, "execute_tool web_fetch")["attributes"]
    assert "{{secret:API_TOKEN}}" in fetch["gen_ai.tool.call.arguments"]
    result = fetch["gen_ai.tool.call.result"]
    assert "your token is [secret:API_TOKEN]" in result
    second_input = chats[1]["attributes"]["gen_ai.input.messages"]
    assert "[secret:API_TOKEN]" in second_input
    assert (
        "Checked."
        in _one(spans, "execute_tool send_to_user")["attributes"]["gen_ai.tool.call.arguments"]
    )
    assert CANARY not in json.dumps(spans)


def test_a_helper_run_joins_the_trace_of_the_turn_that_started_it(
    tmp_path: Path, phoenix: Phoenix
) -> None:
    start = {
        "tool_calls": [
            {"name": "start_helper", "arguments": {"task": "Count to three, then report."}},
            {"name": "send_to_user", "arguments": {"text": "On it.", "final": True}},
        ]
    }
    report = {"tool_calls": [{"name": "report", "arguments": {"text": "One, two, three."}}]}
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps({"replies": [start, say("Done.", final=True)], "helper": [report]})
    )
    with fresh_database("sqlite", tmp_path) as url:
        server = ServerProcess(
            tmp_path / "data",
            url,
            model=f"scripted:{script}",
            env={"NIGHTOWL_OTLP_ENDPOINT": phoenix.url, "OTEL_BSP_SCHEDULE_DELAY": "100"},
        ).start()
        try:
            client = server.client()
            conversation = str(client.post("/v1/conversations", json={}).json()["id"])
            client.post(
                f"/v1/conversations/{conversation}/messages", json={"client_id": "m1", "text": ASK}
            )
            wait_for(lambda: any(m["body"] == "Done." for m in messages(client, conversation)), 60)

            def helper_in_trace() -> list[dict[str, Any]] | None:
                turns = [
                    s
                    for s in phoenix.spans(name="invoke_agent turn")
                    if s["attributes"].get("gen_ai.conversation.id") == conversation
                ]
                if not turns:
                    return None
                first = min(turns, key=lambda s: s["start_time"])
                spans = phoenix.spans(trace_id=first["context"]["trace_id"])
                # Spans are exported as they end: the helper's workflow span ends last.
                ids = {s["context"]["span_id"] for s in spans}
                runs = [s for s in spans if s["name"] == "invoke_agent helper"]
                return spans if runs and runs[0]["parent_id"] in ids else None

            spans = wait_for(helper_in_trace, 60)
        finally:
            server.stop()
    turn = min(
        (s for s in spans if s["name"] == "invoke_agent turn"), key=lambda s: s["start_time"]
    )
    helper = _one(spans, "invoke_agent helper")
    assert helper["attributes"]["nightowl.outcome"] == "done"
    # The helper's workflow (DBOS's span) hangs under the turn; the helper's run under it.
    workflow = next(s for s in spans if s["context"]["span_id"] == helper["parent_id"])
    assert workflow["parent_id"] == turn["context"]["span_id"]
    helper_chat = [s for s in _children(spans, helper) if s["name"].startswith("chat ")]
    assert helper_chat and helper_chat[0]["attributes"]["nightowl.purpose"] == "helper"


@pytest.fixture
def slow_page() -> Iterator[tuple[str, threading.Event, threading.Event]]:
    """A web page that answers only once released: (its URL, set when it is asked, release)."""
    asked, release = threading.Event(), threading.Event()
    app = FastAPI()

    @app.get("/slow")
    def slow() -> PlainTextResponse:  # a thread of uvicorn's pool: the wait blocks only it
        asked.set()
        release.wait(120)
        return PlainTextResponse("the opening hours are 9 to 5")

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 10)
    yield f"http://127.0.0.1:{port}", asked, release
    release.set()
    server.should_exit = True
    thread.join(timeout=5)


def _of(phoenix: Phoenix, name: str, conversation: str) -> list[dict[str, Any]]:
    return [
        s
        for s in phoenix.spans(name=name)
        if s["attributes"].get("gen_ai.conversation.id") == conversation
    ]


def _started(span: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(span["start_time"]).astimezone(UTC)


def test_a_turn_recovered_after_a_sigkill_mid_tool_call_stays_in_its_trace(
    tmp_path: Path,
    backend_url: str,
    phoenix: Phoenix,
    slow_page: tuple[str, threading.Event, threading.Event],
) -> None:
    page, asked, release = slow_page
    fetch = {"name": "web_fetch", "arguments": {"url": f"{page}/slow"}}
    script = tmp_path / "script.json"
    write_script(script, [{"text": "", "tool_calls": [fetch]}, say("Checked.", final=True)])
    document = json.loads(script.read_text())
    script.write_text(json.dumps({**document, "review": {"*": "ALLOW: a read of a web page"}}))
    server = ServerProcess(
        tmp_path / "data",
        backend_url,
        model=f"scripted:{script}",
        env={
            "NIGHTOWL_WEB_FETCH_PRIVATE": "true",
            "NIGHTOWL_OTLP_ENDPOINT": phoenix.url,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        },
    ).start()
    try:
        client = server.client()
        conversation = str(client.post("/v1/conversations", json={}).json()["id"])
        client.post(
            f"/v1/conversations/{conversation}/messages", json={"client_id": "m1", "text": ASK}
        )
        assert asked.wait(60)  # the fetch is running: the turn is mid tool call
        # What ended before the crash is exported: the router's decision, the first model call.
        wait_for(lambda: _of(phoenix, "nightowl.route", conversation), 60)
        [before] = wait_for(
            lambda: [
                s
                for s in phoenix.spans()
                if s["name"].startswith("chat ")
                and s["attributes"].get("gen_ai.conversation.id") == conversation
            ],
            60,
        )
        killed_at = datetime.now(UTC)
        server.kill()
        release.set()
        server.start()
        client = server.client()
        wait_for(lambda: any(m["body"] == "Checked." for m in messages(client, conversation)), 90)

        def recovered() -> list[dict[str, Any]] | None:
            turns = [s for s in _of(phoenix, "invoke_agent turn", conversation)]
            if not turns:
                return None
            spans = phoenix.spans(trace_id=turns[0]["context"]["trace_id"])
            names = {s["name"] for s in spans}
            return spans if {"execute_tool send_to_user", "nightowl.turn"} <= names else None

        spans = wait_for(recovered, 60)
    finally:
        server.stop()
    [route] = _of(phoenix, "nightowl.route", conversation)
    trace_id = route["context"]["trace_id"]
    # One trace: the spans before the crash and the recovered turn's.
    assert before["context"]["trace_id"] == trace_id
    assert {s["context"]["trace_id"] for s in spans} == {trace_id}
    assert all(
        t["context"]["trace_id"] == trace_id
        for t in _of(phoenix, "invoke_agent turn", conversation)
    )
    # The killed process's turn never ended (nothing of it beyond its ended spans was
    # exported); the restarted one ran DBOS's recovered workflow under the router's decision.
    [turn] = [s for s in spans if s["name"] == "invoke_agent turn"]
    assert _started(before) < killed_at < _started(turn)
    workflow = next(s for s in spans if s["context"]["span_id"] == turn["parent_id"])
    assert workflow["name"] == "nightowl.turn"
    assert workflow["parent_id"] == route["context"]["span_id"]
    assert turn["attributes"]["nightowl.outcome"] == "done"
    sent = _one(spans, "execute_tool send_to_user")
    assert sent["parent_id"] == turn["context"]["span_id"] and _started(sent) > killed_at
    # The recorded first model call is not made again; the cut-off fetch is (a read), and
    # the second call follows it: two turn calls in the trace, one on each side of the crash.
    calls = sorted(
        (s for s in spans if s["attributes"].get("nightowl.purpose") == "turn"), key=_started
    )
    assert [c["context"]["span_id"] for c in calls][:1] == [before["context"]["span_id"]]
    assert len(calls) == 2 and calls[1]["parent_id"] == turn["context"]["span_id"]
    [fetched] = [s for s in spans if s["name"] == "execute_tool web_fetch"]
    assert fetched["parent_id"] == turn["context"]["span_id"] and _started(fetched) > killed_at
