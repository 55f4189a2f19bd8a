"""Property-based tests of the whole API, driven by its own OpenAPI document (schemathesis),
against a real server process on SQLite and PostgreSQL.

Every operation gets generated requests, valid and invalid, most of them aimed at real things
(a conversation with a question waiting, a webhook, a routine, a fact, a log entry, a note, a
skill, a secret), as the owner and as a member; webhook deliveries are often signed. Every
answer must be no server error and exactly what the schema declares (status, content type,
body). `make fuzz` runs many more examples: NIGHTOWL_FUZZ_EXAMPLES per operation, and a random
seed unless NIGHTOWL_FUZZ_SEED is set (the suite's own run is derandomized, so it is stable).
"""

from __future__ import annotations

import json
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from nightowl.channels.webhooks import sign
from nightowl.memory.notes import write_note
from nightowl.memory.worklog import write_entry
from nightowl.store.database import Database
from tests.databases import BACKENDS, fresh_database
from tests.server import ServerProcess, say, wait_for, write_script

# Every operation of the schema, a dozen examples each: about 2 minutes on an idle 2-core
# machine, several times that while the rest of the suite shares it.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

EXAMPLES = int(os.environ.get("NIGHTOWL_FUZZ_EXAMPLES", "12"))
REPORT = os.environ.get("NIGHTOWL_FUZZ_REPORT")  # a folder: what the server answered, as JSON
SEED = os.environ.get("NIGHTOWL_FUZZ_SEED")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
ASK = say(
    "Pay the invoice from Acme?",
    buttons=[{"label": "Pay", "value": "pay"}, {"label": "Not now", "value": "no"}],
    ask="approval",
)


# What counts as refusing invalid input: schemathesis's own list, and 413 (a body over the
# limit is refused before it is read: in a long run some negative cases are big).
REFUSALS = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]
# The message routes get more examples, each sent by two clients at once with ids from a few
# (a retry, a reuse for another text or for an answer, the outbox's key form): the ids' rules
# must hold under a race on both databases, never a server error.
RACED = r"^/v1/conversations/\{conversation_id\}/messages(/\{message_id\}/answer)?$"
RACED_IDS = ["first", "r1", "r2", "out:turn_fuzz:0.0", "guard:turn_fuzz", "task:hlp_x:1"]


def _config() -> Any:
    return schemathesis.Config.from_dict(
        {
            **({"seed": int(SEED)} if SEED else {}),
            "checks": {"negative_data_rejection": {"expected-statuses": REFUSALS}},
        }
    )


class RealThings:
    """One real thing of each kind the API names in its paths, made again after a fuzzed
    request deleted it (so later requests still reach a real one)."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.client = server.client()
        self.owner_id = self.client.get("/v1/me").json()["id"]
        self.member_token = server.member_token(f"member-{time.monotonic_ns()}")
        self.database = Database(server.env["NIGHTOWL_DATABASE_URL"])
        conversation = self.client.post("/v1/conversations", json={"title": "fuzz"}).json()
        self.ids: dict[str, str] = {"conversation_id": conversation["id"], "agent": "conv_none"}
        self.client.post(
            f"/v1/conversations/{conversation['id']}/messages",
            json={"client_id": "first", "text": "deal with the Acme invoice"},
        )
        self.ids["message_id"] = wait_for(self._question, timeout=60)
        self._makers: dict[str, Callable[[], str]] = {
            "hook_id": self._hook,
            "routine_id": self._routine,
            "fact_id": self._fact,
            "skill_id": self._skill,
            "entry_id": self._entry,
            "note_id": self._note,
            "name": self._secret,
        }
        for key, make in self._makers.items():
            self.ids[key] = make()
        self.hook_secret = self._hook_secret

    def _question(self) -> str | None:
        page = self.client.get(f"/v1/conversations/{self.ids['conversation_id']}/messages")
        return next((m["id"] for m in page.json()["messages"] if m["controls"]), None)

    def _hook(self) -> str:
        hook = self.client.post("/v1/hooks", json={"name": "fuzz"}).json()
        self._hook_secret = str(hook["secret"])
        self.hook_secret = self._hook_secret
        return str(hook["id"])

    def _routine(self) -> str:
        made = self.client.post(
            "/v1/routines", json={"name": "fuzz", "prompt": "check", "cron": "0 8 * * *"}
        )
        return str(made.json()["id"])

    def _fact(self) -> str:
        return str(self.client.post("/v1/memory/facts", json={"text": "Likes tea"}).json()["id"])

    def _skill(self) -> str:
        made = self.client.post(
            "/v1/memory/skills", json={"name": "fuzz", "description": "d", "body": "b"}
        )
        return str(made.json()["id"])

    def _secret(self) -> str:
        self.client.put("/v1/secrets/FUZZ_KEY", json={"value": "s3cret-value"})
        return "FUZZ_KEY"

    def _entry(self) -> str:
        with self.database.write() as session:
            return write_entry(session, self.owner_id, "Looked into the Acme invoice.").id

    def _note(self) -> str:
        with self.database.write() as session:
            return write_note(session, self.owner_id, "Waiting on Acme.", 600).id

    def deleted(self, names: list[str]) -> None:
        """A request deleted the things named by these path parameters: make new ones."""
        for name in names:
            if name in self._makers:
                self.ids[name] = self._makers[name]()

    def close(self) -> None:
        self.client.close()
        self.database.dispose()


@pytest.fixture(scope="module", params=BACKENDS)
def fuzzed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealThings]:
    """A server (a scripted model that asks a question) with one real thing of each kind."""
    folder: Path = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    with fresh_database(request.param, folder) as url:
        model = write_script(folder / "script.json", [ASK])
        server = ServerProcess(folder / "data", url, model=model).start()
        things = RealThings(server)
        try:
            yield things
        finally:
            if REPORT:
                _report(server, request.param, Path(REPORT))
            things.close()
            server.stop()
            assert not [
                line for line in server.log_lines() if line.get("level") in ("error", "critical")
            ], "the server logged an error while fuzzed"


@pytest.fixture
def api_schema(fuzzed: RealThings, request: pytest.FixtureRequest) -> Any:
    # schemathesis' lazy schema reads `node._nodeid`, which pytest 9.2 no longer has.
    request.node._nodeid = request.node.nodeid
    loaded = schemathesis.openapi.from_url(f"{fuzzed.server.url}/openapi.json", config=_config())
    tokens = {0: fuzzed.server.token, 1: fuzzed.server.token, 2: fuzzed.member_token}

    @loaded.auth(refresh_interval=None)
    class Tokens:
        """The owner's token, a member's, or none (each case picks one)."""

        def get(self, case: Any, _context: Any) -> str | None:
            return tokens.get(_pick(case, "who"))

        def set(self, case: Any, token: str, _context: Any) -> None:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {token}"}

    return loaded


schema = schemathesis.pytest.from_fixture("api_schema").exclude(
    path="/v1/events"  # an endless stream: tested on its own (test_api, test_streams)
)
raced = schemathesis.pytest.from_fixture("api_schema").include(method="POST", path_regex=RACED)


def _pick(case: Any, salt: str) -> int:
    """A number from 0 to 3 that depends only on the generated case (so a failure shrinks
    and replays the same)."""
    seen = repr((case.path_parameters, case.query, case.body, salt))
    return zlib.crc32(seen.encode("utf-8", "backslashreplace")) % 4


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=SEED is None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@schema.parametrize()
def test_no_server_errors_and_answers_match_the_schema(case: Any, fuzzed: RealThings) -> None:
    real = [name for name in case.path_parameters or {} if name in fuzzed.ids]
    path = case.meta.components.get(ParameterLocation.PATH) if case.meta else None
    invalid_path = path is not None and path.mode.is_negative
    if real and not invalid_path and _pick(case, "real") != 0:  # three in four name real things
        case.path_parameters = {**case.path_parameters, **{n: fuzzed.ids[n] for n in real}}
    delivery = case.method == "POST" and case.operation.path == "/v1/hooks/{hook_id}"
    if delivery and _pick(case, "sign") != 0:
        response = _signed_delivery(case, fuzzed)
        case.validate_response(response, checks=CHECKS)
    else:
        response = case.call_and_validate(checks=CHECKS, timeout=30)
    if case.method == "DELETE" and response.status_code == 204:
        fuzzed.deleted(real)


def _signed_delivery(case: Any, fuzzed: RealThings) -> requests.Response:
    """Send the generated delivery signed with the real hook's secret (when it names it)."""
    kwargs = case.as_transport_kwargs(base_url=fuzzed.server.url)
    body = kwargs.get("data") or kwargs.get("json") or b""
    if not isinstance(body, bytes):
        body = httpx.Request("POST", "http://x", json=body).content
    stamp = str(int(time.time()))
    headers = {
        **{k: v for k, v in (kwargs.get("headers") or {}).items() if isinstance(v, str)},
        "X-Nightowl-Timestamp": stamp,
        "X-Nightowl-Signature": sign(fuzzed.hook_secret, stamp, body),
    }
    return requests.post(kwargs["url"], data=body, headers=headers, timeout=30)


@settings(
    max_examples=EXAMPLES * 4,
    deadline=None,
    derandomize=SEED is None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@raced.parametrize()
def test_two_clients_racing_the_same_ids_get_no_server_error(case: Any, fuzzed: RealThings) -> None:
    """The message and answer routes, each case sent by two clients at the same moment, its
    `client_id` (when valid) one of a few both routes share: whatever the order, each answer
    is a documented one (a new message, the original, a 409 for an id taken), never a 500."""
    real = [name for name in case.path_parameters or {} if name in fuzzed.ids]
    path = case.meta.components.get(ParameterLocation.PATH) if case.meta else None
    if real and not (path is not None and path.mode.is_negative):
        case.path_parameters = {**case.path_parameters, **{n: fuzzed.ids[n] for n in real}}
    positive = case.meta is None or not case.meta.generation.mode.is_negative
    named = isinstance(case.body, dict) and isinstance(case.body.get("client_id"), str)
    if positive and named and _pick(case, "reuse") != 0:
        pick = (_pick(case, "id") + 4 * _pick(case, "i2")) % len(RACED_IDS)
        case.body = {**case.body, "client_id": RACED_IDS[pick]}
    start = threading.Barrier(2)

    def send(_: int) -> requests.Response:
        start.wait()
        return case.call(base_url=fuzzed.server.url, timeout=30)

    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(send, range(2)))
    for response in answers:
        case.validate_response(response, checks=CHECKS)


def _report(server: ServerProcess, backend: str, folder: Path) -> None:
    """What the server answered while fuzzed, from its own metrics: requests by status, and
    how many routes they reached (`make fuzz` prints it)."""
    with server.client() as client:
        text = client.get("/metrics").text
    by_status: dict[str, int] = {}
    routes: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("nightowl_http_requests_total{"):
            continue
        labels, value = line.rsplit(" ", 1)
        fields = dict(part.split("=", 1) for part in labels[labels.index("{") + 1 : -1].split(","))
        status = fields["status"].strip('"')
        by_status[status] = by_status.get(status, 0) + int(float(value))
        routes.add(fields["route"].strip('"'))
    folder.mkdir(parents=True, exist_ok=True)
    summary = {
        "backend": backend,
        "examples_per_operation": EXAMPLES,
        "seed": SEED,
        "requests": sum(by_status.values()),
        "routes": len(routes),
        "server_errors": sum(n for status, n in by_status.items() if status.startswith("5")),
        "by_status": dict(sorted(by_status.items())),
    }
    (folder / f"fuzz-{backend}.json").write_text(json.dumps(summary, indent=1))
