"""Channels against real servers on 127.0.0.1: how much a channel adds to the web API's path.

For each surface (the web API, Matrix on a real Synapse, e-mail on a real pymap + aiosmtpd),
ROUNDS messages from the owner, one at a time, each answered by the scripted model's
send_to_user (zero delay), on one server process on SQLite:

- inbound_to_model_p50_ms: the owner's message sent (the client's clock, the same host) → the
  start of its turn's model call (stamped by the server);
- reply_to_channel_p50_ms: the agent's message stored → visible on the channel's server (web:
  fetched by a client following the change feed; Matrix: the event's origin_server_ts; e-mail:
  found in the owner's IMAP mailbox);
- e-mail also reports mail_pickup_p50_ms: the mail handed to SMTP → the router stored it
  (SMTP delivery, the IMAP server's IDLE notice and our fetch: the mail servers' own polling),
  and router_to_model_p50_ms: the router stored it → the model call.

Slack (against tests/channels/slack_api.py, a local stand-in of Slack's API: real Slack is not
reachable from here) over Socket Mode also reports socket_pickup_p50_ms (the owner's message
posted to the stand-in → the router stored the event: the envelope over the websocket, our
listener, the router) and router_to_model_p50_ms; its reply_to_channel is the agent's message
stored → found in the stand-in's channel by a poll every 20 ms.

Telegram runs against the Bot API stand-in of the tests (tests/channels/telegram_api.py: the
real api.telegram.org cannot be reached here), by long polling; it reports update_pickup_p50_ms
(the stand-in has the update → the router stored it: the getUpdates long poll's wake-up, our
listener, the router) and router_to_model_p50_ms; reply_to_channel is the agent's message
stored → the stand-in took the sendMessage. Internet latency to Telegram is not in it.

Matrix also reports sync_pickup_p50_ms (the homeserver stored the event → the router stored it:
the sync long poll's wake-up, our listener, the router) and router_to_model_p50_ms.

`added_vs_web_ms` is each channel's figure minus the web API's: inbound from the moment the
channel's server has the event (Matrix: sync_pickup + router_to_model; e-mail: router_to_model,
the mail servers' pickup being reported on its own; Slack: socket_pickup + router_to_model;
Telegram: update_pickup + router_to_model)
against the web API's client send → model.
Prints one JSON object: {"web": {…}, "matrix": {…}, "email": {…}, "slack": {…},
"telegram": {…}}. Arguments pick surfaces (`python bench/channels.py web slack`); the web API
always runs (the baseline).
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from common import ROOT, ServerProcess, percentile, wait_for, write_script

sys.path.insert(0, str(ROOT))
from tests.channels.servers import DkimKey, MailServer, Synapse, ensure_installed, mail
from tests.channels.slack_api import BOT, OWNER, OWNER_DM, SlackStandIn
from tests.channels.telegram_standin import OWNER_ID, TelegramStandIn

ROUNDS = 10
PASSWORD = "bench-mail-password-0123456789"


def _at(value: Any) -> float:
    return (datetime.fromisoformat(value) if isinstance(value, str) else value).timestamp()


class Store:
    """Reads the server's SQLite store."""

    def __init__(self, path: Path) -> None:
        self.engine = create_engine(f"sqlite:///{path}")

    def one(self, query: str, **params: Any) -> Any:
        with self.engine.connect() as connection:
            return connection.execute(text(query), params).first()

    def model_start(self, conversation: str, n: int) -> float | None:
        row = self.one(
            "SELECT started_at FROM model_calls WHERE conversation_id = :c "
            "ORDER BY started_at LIMIT 1 OFFSET :n",
            c=conversation,
            n=n,
        )
        return None if row is None else _at(row[0]) if row[0] else None

    def agent_message(self, conversation: str, n: int) -> tuple[str, float] | None:
        row = self.one(
            "SELECT id, created_at FROM messages WHERE conversation_id = :c AND role = 'agent' "
            "ORDER BY seq LIMIT 1 OFFSET :n",
            c=conversation,
            n=n,
        )
        return None if row is None else (row[0], _at(row[1]))

    def received(self, conversation: str, n: int) -> float:
        row = self.one(
            "SELECT received_at FROM triggers WHERE conversation_id = :c "
            "ORDER BY received_at LIMIT 1 OFFSET :n",
            c=conversation,
            n=n,
        )
        return _at(row[0])


def _summary(samples: dict[str, list[float]]) -> dict[str, float]:
    return {f"{name}_p50_ms": round(percentile(v, 50), 1) for name, v in samples.items()}


def web(server: ServerProcess, store: Store) -> dict[str, float]:
    samples: dict[str, list[float]] = {"inbound_to_model": [], "reply_to_channel": []}
    with server.client() as client:
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        seen: dict[int, float] = {}
        stop = threading.Event()

        def follow() -> None:  # a client of the change feed: fetch on every notification
            with server.client() as http, http.stream("GET", "/v1/events") as events:
                for line in events.iter_lines():
                    if stop.is_set():
                        return
                    if line.startswith("data:"):
                        page = http.get(f"/v1/conversations/{conversation}/messages").json()
                        now = time.time()
                        for m in page["messages"]:
                            if m["role"] == "agent":
                                seen.setdefault(m["seq"], now)

        threading.Thread(target=follow, daemon=True).start()
        time.sleep(0.5)
        for n in range(ROUNDS):
            sent = time.time()
            client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": f"b{n}", "text": f"question {n}"},
            )
            started = wait_for(lambda n=n, c=conversation: store.model_start(c, n), 30)
            message_id, stored = wait_for(lambda n=n, c=conversation: store.agent_message(c, n), 30)
            seq = client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
            agent_seq = next(m["seq"] for m in seq if m["id"] == message_id)
            visible = wait_for(lambda s=agent_seq: seen.get(s), 30)
            samples["inbound_to_model"].append((started - sent) * 1000)
            samples["reply_to_channel"].append((visible - stored) * 1000)
        stop.set()
    return _summary(samples)


def matrix(server: ServerProcess, store: Store, synapse: Synapse) -> dict[str, float]:
    bot, owner = synapse.register("bot"), synapse.register("owner")
    with server.client() as client:
        client.put("/v1/secrets/MATRIX_TOKEN", json={"value": bot.token})
        client.post(
            "/v1/channels",
            json={
                "name": "matrix",
                "kind": "matrix",
                "settings": {
                    "homeserver": synapse.url,
                    "user_id": bot.user_id,
                    "owner": owner.user_id,
                    "access_token_secret": "MATRIX_TOKEN",
                },
            },
        )
        wait_for(lambda: client.get("/v1/channels").json()[-1]["status"] == "ok", 30)
        room = owner.create_room([bot.user_id], direct=True)
        joined = f"/_matrix/client/v3/rooms/{room}/joined_members"
        wait_for(lambda: bot.user_id in owner.call("GET", joined)["joined"], 30)
        samples: dict[str, list[float]] = {
            "inbound_to_model": [],
            "sync_pickup": [],
            "router_to_model": [],
            "reply_to_channel": [],
        }
        conversation = None
        for n in range(ROUNDS):
            sent = time.time()
            event_id = owner.say(room, f"question {n}")
            if conversation is None:
                conversation = wait_for(
                    lambda: [
                        c
                        for c in client.get("/v1/conversations").json()
                        if c["channel"] == "matrix"
                    ],
                    30,
                )[0]["id"]
            started = wait_for(lambda n=n, c=conversation: store.model_start(c, n), 30)
            _, stored = wait_for(lambda n=n, c=conversation: store.agent_message(c, n), 30)
            events = wait_for(
                lambda n=n: [m for m in owner.messages(room) if m["sender"] == bot.user_id][n:],
                30,
                interval=0.02,
            )
            stamped = owner.call("GET", f"/_matrix/client/v3/rooms/{room}/event/{event_id}")
            received = store.received(conversation, n)
            samples["inbound_to_model"].append((started - sent) * 1000)
            samples["sync_pickup"].append((received - stamped["origin_server_ts"] / 1000) * 1000)
            samples["router_to_model"].append((started - received) * 1000)
            samples["reply_to_channel"].append(
                (events[0]["origin_server_ts"] / 1000 - stored) * 1000
            )
    return _summary(samples)


def slack(server: ServerProcess, store: Store, stand_in: SlackStandIn) -> dict[str, float]:
    with server.client() as client:
        client.put("/v1/secrets/SLACK_BOT", json={"value": stand_in.bot_token})
        client.put("/v1/secrets/SLACK_APP", json={"value": stand_in.app_token})
        client.post(
            "/v1/channels",
            json={
                "name": "slack",
                "kind": "slack",
                "settings": {
                    "api_url": stand_in.api_url,
                    "owner": OWNER,
                    "bot_token_secret": "SLACK_BOT",
                    "app_token_secret": "SLACK_APP",
                },
            },
        )
        wait_for(lambda: client.get("/v1/channels").json()[-1]["status"] == "ok", 30)
        wait_for(stand_in.sockets, 30)
        samples: dict[str, list[float]] = {
            "inbound_to_model": [],
            "socket_pickup": [],
            "router_to_model": [],
            "reply_to_channel": [],
        }
        conversation = None
        for n in range(ROUNDS):
            sent = time.time()
            stand_in.say(OWNER, OWNER_DM, f"question {n}")
            if conversation is None:
                conversation = wait_for(
                    lambda: [
                        c for c in client.get("/v1/conversations").json() if c["channel"] == "slack"
                    ],
                    30,
                )[0]["id"]
            started = wait_for(lambda n=n, c=conversation: store.model_start(c, n), 30)
            received = store.received(conversation, n)
            _, stored = wait_for(lambda n=n, c=conversation: store.agent_message(c, n), 30)
            wait_for(lambda n=n: stand_in.from_bot(OWNER_DM)[n:], 30, interval=0.02)
            visible = time.time()
            samples["inbound_to_model"].append((started - sent) * 1000)
            samples["socket_pickup"].append((received - sent) * 1000)
            samples["router_to_model"].append((started - received) * 1000)
            samples["reply_to_channel"].append((visible - stored) * 1000)
    assert all(m["user"] == BOT for m in stand_in.from_bot(OWNER_DM))
    return _summary(samples)


def email(server: ServerProcess, store: Store, mails: MailServer) -> dict[str, float]:
    key = DkimKey("example.test")  # the owner's mail is DKIM-signed and checked, as in use
    with server.client() as client:
        client.put("/v1/secrets/MAIL_PASSWORD", json={"value": PASSWORD})
        client.post(
            "/v1/channels",
            json={
                "name": "mail",
                "kind": "email",
                "settings": {
                    "address": "bot@example.test",
                    "owner": "owner@example.test",
                    "username": "bot",
                    "password_secret": "MAIL_PASSWORD",
                    "imap_host": "127.0.0.1",
                    "imap_port": mails.imap_port,
                    "imap_security": "none",
                    "smtp_host": "127.0.0.1",
                    "smtp_port": mails.smtp_port,
                    "smtp_security": "none",
                    "smtp_auth": False,
                    "dkim_keys": key.pinned,
                },
            },
        )
        wait_for(lambda: client.get("/v1/channels").json()[-1]["status"] == "ok", 30)
        samples: dict[str, list[float]] = {
            "inbound_to_model": [],
            "mail_pickup": [],
            "router_to_model": [],
            "reply_to_channel": [],
        }
        conversation = None
        previous = "<b0@example.test>"
        for n in range(ROUNDS):
            headers = {} if n == 0 else {"In_Reply_To": previous, "References": previous}
            sent = time.time()
            mails.send(
                key.sign(
                    mail(
                        "owner@example.test",
                        "bot@example.test",
                        "Bench",
                        f"question {n}",
                        f"<b{n + 1}@example.test>" if n else previous,
                        **headers,
                    )
                )
            )
            if conversation is None:
                conversation = wait_for(
                    lambda: [
                        c for c in client.get("/v1/conversations").json() if c["channel"] == "email"
                    ],
                    60,
                )[0]["id"]
            started = wait_for(lambda n=n, c=conversation: store.model_start(c, n), 60)
            received = store.received(conversation, n)
            _, stored = wait_for(lambda n=n, c=conversation: store.agent_message(c, n), 30)
            answer = wait_for(lambda n=n: mails.mailbox("owner")[n:], 30, interval=0.02)
            visible = time.time()
            previous = answer[0]["Message-ID"]
            samples["inbound_to_model"].append((started - sent) * 1000)
            samples["mail_pickup"].append((received - sent) * 1000)
            samples["router_to_model"].append((started - received) * 1000)
            samples["reply_to_channel"].append((visible - stored) * 1000)
    return _summary(samples)


def telegram(server: ServerProcess, store: Store, api: TelegramStandIn) -> dict[str, float]:
    with server.client() as client:
        client.put("/v1/secrets/TG_TOKEN", json={"value": api.token})
        client.post(
            "/v1/channels",
            json={
                "name": "telegram",
                "kind": "telegram",
                "settings": {
                    "api_url": api.url,
                    "owner": str(OWNER_ID),
                    "bot_token_secret": "TG_TOKEN",
                },
            },
        )
        wait_for(lambda: client.get("/v1/channels").json()[-1]["status"] == "ok", 30)
        samples: dict[str, list[float]] = {
            "inbound_to_model": [],
            "update_pickup": [],
            "router_to_model": [],
            "reply_to_channel": [],
        }
        conversation = None
        for n in range(ROUNDS):
            sent = time.time()
            arrived = api.say(f"question {n}")["at"]
            if conversation is None:
                conversation = wait_for(
                    lambda: [
                        c
                        for c in client.get("/v1/conversations").json()
                        if c["channel"] == "telegram"
                    ],
                    30,
                )[0]["id"]
            started = wait_for(lambda n=n, c=conversation: store.model_start(c, n), 30)
            _, stored = wait_for(lambda n=n, c=conversation: store.agent_message(c, n), 30)
            replies = wait_for(lambda n=n: api.sent(OWNER_ID)[n:], 30, interval=0.02)
            received = store.received(conversation, n)
            samples["inbound_to_model"].append((started - sent) * 1000)
            samples["update_pickup"].append((received - arrived) * 1000)
            samples["router_to_model"].append((started - received) * 1000)
            samples["reply_to_channel"].append((replies[0]["_at"] - stored) * 1000)
    return _summary(samples)


def main() -> None:
    surfaces = set(sys.argv[1:]) or {"matrix", "email", "slack", "telegram"}
    if surfaces & {"matrix", "email"}:
        ensure_installed()
    with tempfile.TemporaryDirectory(prefix="nightowl-bench-channels-") as folder:
        base = Path(folder)
        model = write_script(
            base / "script.json",
            [
                {
                    "tool_calls": [
                        {"name": "send_to_user", "arguments": {"text": "ok", "final": True}}
                    ]
                }
            ],
            then="repeat_last",
        )
        synapse = Synapse(base / "synapse").start() if "matrix" in surfaces else None
        mails = (
            MailServer(base / "mail", {"bot": PASSWORD, "owner": PASSWORD}).start()
            if "email" in surfaces
            else None
        )
        stand_in = SlackStandIn().start() if "slack" in surfaces else None
        api = (
            TelegramStandIn(base / "telegram", "7000001:bench-token").start()
            if "telegram" in surfaces
            else None
        )
        server = ServerProcess(
            base / "data",
            model=model,
            env={"NIGHTOWL_MEMORY_PASS": "off", "NIGHTOWL_CHANNEL_RELOAD_S": "0.5"},
        ).start()
        store = Store(base / "data" / "nightowl.db")
        try:
            result: dict[str, dict[str, float]] = {"web": web(server, store)}
            if synapse is not None:
                result["matrix"] = matrix(server, store, synapse)
            if mails is not None:
                result["email"] = email(server, store, mails)
            if stand_in is not None:
                result["slack"] = slack(server, store, stand_in)
            if api is not None:
                result["telegram"] = telegram(server, store, api)
        finally:
            server.stop()
            for running in (synapse, mails, stand_in, api):
                if running is not None:
                    running.stop()
    base_in = result["web"]["inbound_to_model_p50_ms"]
    base_out = result["web"]["reply_to_channel_p50_ms"]
    # Inbound from the moment the channel's server has the event.
    inbound_of = {
        "matrix": ("sync_pickup_p50_ms", "router_to_model_p50_ms"),
        "email": ("router_to_model_p50_ms",),
        "slack": ("socket_pickup_p50_ms", "router_to_model_p50_ms"),
        "telegram": ("update_pickup_p50_ms", "router_to_model_p50_ms"),
    }
    for name in [n for n in inbound_of if n in result]:
        inbound = sum(result[name][key] for key in inbound_of[name])
        result[name]["added_vs_web_ms"] = {  # type: ignore[assignment]
            "inbound": round(inbound - base_in, 1),
            "reply": round(result[name]["reply_to_channel_p50_ms"] - base_out, 1),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
