"""The live view's websocket closes within seconds of its token's revocation (a real desktop:
Xvfb and x11vnc in a bubblewrap sandbox; the display routes served by uvicorn)."""

from __future__ import annotations

import asyncio

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from nightowl.store.tables import AccessToken
from nightowl.store.users import create_token, revoke_token
from tests.computer.test_desktop import AGENT, Desk, desk, serving  # noqa: F401 - desk: fixture

pytestmark = pytest.mark.slow


def test_the_live_view_closes_soon_after_its_token_is_revoked(desk: Desk) -> None:  # noqa: F811
    with desk.database.write() as session:
        info, token = create_token(session, desk.owner, "tablet")

    async def scenario() -> tuple[int, str]:
        assert not (await desk.call("desktop_screenshot")).is_error  # the display exists
        async with (
            serving(desk) as host,
            connect(
                f"ws://{host}/v1/displays/{AGENT}/vnc", subprotocols=[Subprotocol("binary")]
            ) as ws,
        ):
            await ws.send(token)
            assert isinstance(await asyncio.wait_for(ws.recv(), 15), bytes)  # the RFB greeting
            with desk.database.write() as session:
                revoke_token(session, info.id)
            with pytest.raises(ConnectionClosed) as closed:
                while True:  # whatever the display still sends, until the server closes
                    await asyncio.wait_for(ws.recv(), 15)
        assert closed.value.rcvd is not None
        return closed.value.rcvd.code, closed.value.rcvd.reason

    code, reason = asyncio.run(scenario())
    assert code == 4401 and "revoked" in reason
    with desk.database.read() as session:
        assert session.get(AccessToken, info.id).revoked_at is not None
