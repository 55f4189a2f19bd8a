"""The desktop through a computer host against the desktop in this process: what one X program
costs (`xdotool getmouselocation` on the agent's display), and how long the live view takes to
its first full frame (RFB handshake, a full update request, all 1280x800 raw pixels read),
p50 of each; the host's over its VNC websocket, bridged as the API server bridges it.

Prints JSON. The host runs on 127.0.0.1: the numbers are the tier's own cost, not a network's.
"""

from __future__ import annotations

import asyncio
import json
import struct
import sys
from pathlib import Path
from time import perf_counter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import percentile  # noqa: E402
from bench.computer_tier import near_and_far  # noqa: E402

from nightowl.computer.computers import Computers  # noqa: E402
from nightowl.computer.desktop import Desktops  # noqa: E402
from nightowl.computer.remote import RemoteComputers  # noqa: E402
from nightowl.computer.remote_desktop import RemoteDesktops  # noqa: E402

UID_BASE = 3_670_000
AGENT = "cnv_bench"


async def _first_frame(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Speak RFB (no auth, shared) up to a full raw framebuffer update, read in full."""
    await reader.readexactly(12)
    writer.write(b"RFB 003.008\n")
    await reader.readexactly((await reader.readexactly(1))[0])
    writer.write(bytes([1]))
    await reader.readexactly(4)
    writer.write(bytes([1]))
    init = await reader.readexactly(24)
    width, height = struct.unpack(">HH", init[:4])
    await reader.readexactly(struct.unpack(">I", init[20:24])[0])
    writer.write(struct.pack(">BBHHHH", 3, 0, 0, 0, width, height))
    _, _, rectangles = struct.unpack(">BBH", await reader.readexactly(4))
    for _ in range(rectangles):
        _, _, w, h, encoding = struct.unpack(">HHHHi", await reader.readexactly(12))
        assert encoding == 0, encoding
        await reader.readexactly(w * h * init[4] // 8)


async def _desktop(
    computers: Computers | RemoteComputers,
    desktops: Desktops | RemoteDesktops,
    user: str,
    calls: int,
    views: int,
) -> tuple[list[float], list[float]]:
    """Milliseconds per X program and per live view's first frame."""
    x_ms, frame_ms = [], []
    sandbox = await computers.acquire(user, "bench-turn")
    argv = ["xdotool", "getmouselocation"]
    await desktops.run_x(user, AGENT, sandbox, argv)  # starts the display
    for _ in range(calls):
        began = perf_counter()
        ran = await desktops.run_x(user, AGENT, sandbox, argv)
        x_ms.append((perf_counter() - began) * 1000)
        assert ran.captured is not None and ran.captured.exit_code == 0, ran
    await computers.release("bench-turn")
    for n in range(views + 1):
        began = perf_counter()
        async with desktops.vnc(user, AGENT) as (reader, writer):
            await _first_frame(reader, writer)
        if n:  # the first also starts x11vnc
            frame_ms.append((perf_counter() - began) * 1000)
    return x_ms, frame_ms


def desktop_through_a_host(calls: int = 30, views: int = 9) -> dict[str, float]:
    """X program and first-frame p50s, in process and through a host."""
    with near_and_far("nightowl-tier-desktop-", UID_BASE) as pair:
        here = asyncio.run(_desktop(pair.local, Desktops(pair.local), pair.near, calls, views))
        there = asyncio.run(_desktop(pair.tier, RemoteDesktops(pair.tier), pair.far, calls, views))
    return {
        "in_process_x_p50_ms": round(percentile(here[0], 50), 1),
        "remote_x_p50_ms": round(percentile(there[0], 50), 1),
        "in_process_first_frame_p50_ms": round(percentile(here[1], 50), 1),
        "remote_first_frame_p50_ms": round(percentile(there[1], 50), 1),
    }


if __name__ == "__main__":
    print(json.dumps(desktop_through_a_host(), indent=2))
