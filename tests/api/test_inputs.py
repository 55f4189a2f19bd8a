"""Bad input gets a clear 4xx in the error shape, names the field, and changes nothing, on
SQLite and PostgreSQL alike (each case here answered 500 once, on one backend or both)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from nightowl.channels.webhooks import sign
from tests.server import ServerProcess

LONE_SURROGATE = '"a\\ud800b"'  # JSON's escape for U+D800, which no UTF-8 text can hold
MAX_INT64 = 2**63 - 1


def _post_raw(client: httpx.Client, path: str, body: str) -> httpx.Response:
    """POST a JSON text as is (json.dumps would refuse or rewrite what we test)."""
    return client.post(path, content=body.encode(), headers={"Content-Type": "application/json"})


def _refused(response: httpx.Response, field: str, why: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert field in error["message"] and why in error["message"], error["message"]


def _conversation(client: httpx.Client, title: str = "t") -> str:
    made = client.post("/v1/conversations", json={"title": title})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def test_a_lone_surrogate_is_refused_in_every_kind_of_text(server: ServerProcess) -> None:
    with server.client() as client:
        conversation = _conversation(client)
        conversations = len(client.get("/v1/conversations").json())
        path = f"/v1/conversations/{conversation}/messages"
        message = _post_raw(client, path, f'{{"client_id": "s1", "text": {LONE_SURROGATE}}}')
        _refused(message, "text", "lone surrogate")
        titled = _post_raw(client, "/v1/conversations", f'{{"title": {LONE_SURROGATE}}}')
        _refused(titled, "title", "lone surrogate")
        fact = _post_raw(client, "/v1/memory/facts", f'{{"text": {LONE_SURROGATE}}}')
        _refused(fact, "text", "lone surrogate")
        skill = _post_raw(
            client,
            "/v1/memory/skills",
            f'{{"name": "s", "description": "d", "body": {LONE_SURROGATE}}}',
        )
        _refused(skill, "body", "lone surrogate")
        entry = client.patch(
            "/v1/memory/log/log_x",
            content=f'{{"summary": {LONE_SURROGATE}}}'.encode(),
            headers={"Content-Type": "application/json"},
        )
        _refused(entry, "summary", "lone surrogate")
        routine = _post_raw(
            client,
            "/v1/routines",
            f'{{"name": "r", "prompt": {LONE_SURROGATE}, "cron": "0 8 * * *"}}',
        )
        _refused(routine, "prompt", "lone surrogate")
        # Nothing was stored by any of them.
        assert client.get(path).json()["messages"] == []
        assert client.get("/v1/memory/facts").json() == []
        assert client.get("/v1/memory/skills").json() == []
        assert client.get("/v1/routines").json() == []
        assert len(client.get("/v1/conversations").json()) == conversations


def test_a_nul_character_is_refused_the_same_way_on_both_databases(
    server: ServerProcess,
) -> None:
    with server.client() as client:
        conversation = _conversation(client)
        path = f"/v1/conversations/{conversation}/messages"
        message = client.post(path, json={"client_id": "n1", "text": "before\x00after"})
        _refused(message, "text", "NUL")
        titled = client.post("/v1/conversations", json={"title": "a\x00b"})
        _refused(titled, "title", "NUL")
        fact = client.post("/v1/memory/facts", json={"text": "likes \x00 tea"})
        _refused(fact, "text", "NUL")
        in_path = client.get("/v1/conversations/conv_%00x/messages")
        _refused(in_path, "conversation_id", "letters, digits")
        fact_path = client.patch("/v1/memory/facts/fact_%00", json={"archived": True})
        _refused(fact_path, "fact_id", "letters, digits")
        in_query = client.get("/v1/memory/search", params={"q": "tea\x00"})
        _refused(in_query, "q", "NUL")
        audit = client.get("/v1/audit", params={"conversation_id": "conv\x00"})
        _refused(audit, "conversation_id", "letters, digits")
        assert client.get(path).json()["messages"] == []
        assert client.get("/v1/memory/facts").json() == []


def test_integers_past_64_bits_are_refused_and_large_ones_work(server: ServerProcess) -> None:
    with server.client() as client:
        conversation = _conversation(client)
        path = f"/v1/conversations/{conversation}/messages"
        client.post(path, json={"client_id": "i1", "text": "one"})
        # Past 32 bits is a fine position (PostgreSQL's old int4 answered 500 here).
        beyond_32 = client.get(path, params={"after": 2**40})
        assert beyond_32.status_code == 200 and beyond_32.json()["messages"] == []
        assert client.get(path, params={"after": MAX_INT64}).status_code == 200
        _refused(client.get(path, params={"after": 2**64}), "after", "less than or equal")
        _refused(client.get(path, params={"after": MAX_INT64 + 1}), "after", "less than")
        _refused(client.get("/v1/audit", params={"before": "1e23"}), "before", "integer")
        _refused(client.get("/v1/audit", params={"before": 2**70}), "before", "less than")
        assert client.get("/v1/audit", params={"before": 2**40}).json() == []
        _refused(client.get("/v1/audit", params={"limit": 2**70}), "limit", "less than")
        read = client.post(f"/v1/conversations/{conversation}/read", json={"seq": 2**64})
        _refused(read, "seq", "less than")
        assert client.get(f"/v1/conversations/{conversation}").json()["read_seq"] == 0
        files = client.get(f"{path}/msg_x/files/{2**64}")
        _refused(files, "index", "less than")


def test_the_schema_states_every_bound(server: ServerProcess) -> None:
    spec = httpx.get(f"{server.url}/openapi.json").json()
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            for parameter in operation.get("parameters", []):
                schema = _plain(parameter["schema"])
                where = f"{method.upper()} {path} {parameter['name']}"
                if schema.get("type") == "integer":
                    assert "maximum" in schema and "minimum" in schema, where
                if schema.get("type") == "string" and parameter["in"] != "header":
                    assert "maxLength" in schema, where
            # Every error an operation answers is declared, in the one error shape.
            for status, answer in operation["responses"].items():
                if status.startswith("4"):
                    ref = answer["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/ErrorOut"), (method, path, status)


def test_the_schema_lists_every_status_an_operation_can_answer(server: ServerProcess) -> None:
    """What a client generated from the document must handle, per operation: 401 where a
    token is needed, 400 and 413 where a body is read, 422 where there is input, 404 where
    the path names a thing, 429 (but /healthz) and 503 with the seconds in Retry-After."""
    spec = httpx.get(f"{server.url}/openapi.json").json()
    checked = 0
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            where = {p["in"] for p in operation.get("parameters", [])}
            wanted = {"503"} | ({"429"} if path != "/healthz" else set())
            if operation.get("security"):
                wanted.add("401")
            if "requestBody" in operation:
                wanted |= {"400", "413", "422"}
            if "path" in where:
                wanted |= {"404", "422"}
            declared = operation["responses"]
            assert wanted <= set(declared), (method, path, wanted - set(declared))
            for status in {"429", "503"} & set(declared):
                assert declared[status]["headers"]["Retry-After"]["required"], (method, path)
            for status, answer in declared.items():
                if status[0] in "45":
                    ref = answer["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith("/ErrorOut"), (method, path, status)
            checked += 1
    assert checked >= 80
    sent = spec["paths"]["/v1/conversations/{conversation_id}/messages"]["post"]["responses"]
    assert {"200", "201", "409"} <= set(sent)  # a retry, a new message, an id reused


def _plain(schema: dict[str, Any]) -> dict[str, Any]:
    """The non-null branch of an optional parameter's schema."""
    for branch in schema.get("anyOf", []):
        if branch.get("type") != "null":
            return dict(branch)
    return schema


def test_every_text_field_refuses_a_nul_and_names_itself(server: ServerProcess) -> None:
    """Walk the OpenAPI document: a NUL in any string of any body, query or path is a 422
    that names that field (the guard against a new field that skips the check)."""
    spec = httpx.get(f"{server.url}/openapi.json").json()
    schemas = spec["components"]["schemas"]
    tried = 0
    with server.client() as client:
        for path, methods in spec["paths"].items():
            for method, operation in methods.items():
                names = {p["name"]: p["in"] for p in operation.get("parameters", [])}
                path_values = {n: "x1" for n, where in names.items() if where == "path"}
                for name, where in names.items():
                    if where == "header" or not _is_text(operation, name):
                        continue
                    values = {**path_values}
                    query = {}
                    if where == "path":
                        values[name] = "a%00b"
                    else:
                        query[name] = "a\x00b"
                    url = path.format(**values)
                    answer = client.request(method, url, params=query, json=None)
                    _refused(answer, name, "")
                    tried += 1
                body = operation.get("requestBody", {}).get("content", {})
                ref = body.get("application/json", {}).get("schema", {}).get("$ref")
                if not ref:
                    continue
                properties = schemas[ref.rsplit("/", 1)[1]]["properties"]
                for field, schema in properties.items():
                    if _plain(schema).get("type") != "string" or "enum" in _plain(schema):
                        continue
                    url = path.format(**path_values)
                    answer = client.request(method, url, json={field: "a\x00b"})
                    _refused(
                        answer, field, "letters, digits" if "pattern" in _plain(schema) else "NUL"
                    )
                    tried += 1
    assert tried > 30


def _is_text(operation: dict[str, Any], name: str) -> bool:
    for parameter in operation.get("parameters", []):
        if parameter["name"] == name:
            schema = _plain(parameter["schema"])
            return schema.get("type") == "string" and "enum" not in schema
    return False


def test_a_webhook_payload_that_is_not_storable_text_is_refused(server: ServerProcess) -> None:
    with server.client() as client:
        hook = client.post("/v1/hooks", json={"name": "inputs"}).json()

    def deliver(body: bytes, delivery: str, content_type: str) -> httpx.Response:
        stamp = str(int(time.time()))
        return httpx.post(
            f"{server.url}{hook['url_path']}",
            content=body,
            headers={
                "Content-Type": content_type,
                "X-Nightowl-Timestamp": stamp,
                "X-Nightowl-Signature": sign(hook["secret"], stamp, body),
                "X-Nightowl-Delivery": delivery,
            },
        )

    nul = deliver(b"plain \x00 text", "d-nul", "text/plain")
    assert nul.status_code == 422 and "NUL" in nul.json()["error"]["message"]
    # In JSON, what cannot be stored stays escaped: the delivery is kept, faithfully.
    escaped = deliver(b'{"note": "a\\ud800b", "zero": "\\u0000"}', "d-json", "application/json")
    assert escaped.status_code == 202, escaped.text
    bad_id = deliver(b"{}", "tab\there", "application/json")
    assert bad_id.status_code == 400
    deep = deliver(b"[" * 100_000 + b"]" * 100_000, "d-deep", "application/json")
    assert deep.status_code == 202, deep.text
    with server.client() as client:
        page = client.get(f"/v1/conversations/{hook['conversation_id']}/messages").json()
    bodies = [m["body"] for m in page["messages"]]
    assert len(bodies) == 2
    assert json.loads(bodies[0]) == {"note": "a\ud800b", "zero": "\x00"}
