"""From inside a user's sandbox the host and other users are out of reach, and limits hold."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

from nightowl.computer.cgroups import detect
from nightowl.computer.computers import Computers
from nightowl.computer.network import host_addresses
from nightowl.computer.sandbox import Sandbox
from tests.computer.sandboxes import computers_for, new_user
from tests.netns_hosts import (
    PROBE,
    NetnsHost,
    host_in_netns,
    outside_stand_in,
    refused_ranges_sample,
)


async def _sh(sandbox: Sandbox, command: str, timeout_s: float = 20) -> tuple[int | None, str]:
    result = await sandbox.run(command, output="out.log", timeout_s=timeout_s)
    text = (await sandbox.call({"op": "read", "path": "out.log"}))["text"]
    return result.exit_code, str(text)


async def _acquire(computers: Computers, name: str) -> tuple[str, Sandbox]:
    user = new_user(computers.database, name)
    return user, await computers.acquire(user, f"turn-{name}")


def test_the_host_and_other_users_are_out_of_reach(tmp_path: Path) -> None:
    async def scenario() -> None:
        with computers_for(tmp_path, network="egress") as computers:
            alice, sandbox = await _acquire(computers, "alice")
            bob, other = await _acquire(computers, "bob")
            await other.call({"op": "write", "path": "secret.txt", "content": "bob's"})
            bob_home = computers.home(bob)
            assert (bob_home / "secret.txt").read_text() == "bob's"

            code, text = await _sh(sandbox, "id -u; cat /etc/shadow")
            assert code != 0 and "Permission denied" in text
            assert text.split()[0] == str(os.stat(computers.home(alice)).st_uid) != "0"

            code, text = await _sh(sandbox, f"cat {bob_home}/secret.txt; ls /home")
            assert "bob's" not in text and text.split()[-1] == "agent"

            for target in ("/usr/evil", "/etc/evil", "/evil", "/home/evil"):
                code, text = await _sh(sandbox, f"touch {target}")
                assert code != 0, f"could write {target}: {text}"
            assert not Path("/usr/evil").exists() and not Path("/etc/evil").exists()
            code, _ = await _sh(sandbox, "touch ~/mine /tmp/scratch")
            assert code == 0 and (computers.home(alice) / "mine").exists()

            code, text = await _sh(sandbox, "grep Cap /proc/self/status")
            assert all(line.endswith("0000000000000000") for line in text.splitlines())

    with socket.create_connection(("127.0.0.1", 5432), timeout=2):
        pass  # PostgreSQL does listen on the host
    asyncio.run(scenario())


def test_the_host_and_private_networks_are_unreachable_with_egress(tmp_path: Path) -> None:
    """Each refused range is a test host of ours, so a broken rule would reach only it."""
    own = next(a for a in host_addresses() if not a.startswith("127."))
    listener = socket.create_server(("0.0.0.0", 0))  # a host service on every address
    port = listener.getsockname()[1]
    outside = outside_stand_in()

    async def scenario(host: NetnsHost) -> None:
        with computers_for(tmp_path, network="egress") as computers:
            _, sandbox = await _acquire(computers, "carol")
            await sandbox.call({"op": "write", "path": "probe.py", "content": PROBE})
            targets = [
                "127.0.0.1:5432",  # the sandbox's own loopback: no PostgreSQL there
                "10.0.2.2:5432",  # slirp's way to the host's loopback: disabled
                f"{own}:{port}",  # the host's own address
                *(f"{a}:{host.port}" for a in host.addresses if a != outside),  # 10/8, 100.64/10,
            ]  # link-local (where cloud metadata is), 172.16/12, 192.168/16
            allowed = f"{outside}:{host.port}"
            code, text = await _sh(sandbox, f"python3 probe.py {allowed} {' '.join(targets)}")
            assert code == 0
            for target in targets:
                assert f"{target} refused" in text, text
            assert f"{allowed} open hello from the test host" in text  # egress works
            assert host.contacts() == [outside]

    try:
        with host_in_netns(tmp_path, (*refused_ranges_sample(), outside)) as host:
            asyncio.run(scenario(host))
    finally:
        listener.close()


def test_a_fork_bomb_and_a_memory_hog_are_stopped_and_the_server_goes_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        with computers_for(tmp_path, memory_mb=256, pids=64) as computers:
            _, sandbox = await _acquire(computers, "dave")
            assert detect() is not None and sandbox.cgroup is not None  # this machine has them
            code, text = await _sh(
                sandbox, "python3 -c 'x = bytearray(1024 ** 3); print(len(x))'", timeout_s=30
            )
            assert code != 0 and "1073741824" not in text
            assert sandbox.cgroup.memory_events()["oom_kill"] >= 1

            result = await sandbox.run("bomb() { bomb | bomb & }; bomb; sleep 30", timeout_s=5)
            assert result.timed_out or result.exit_code != 0  # its own `sleep` could not fork
            assert sandbox.cgroup.pids_refused() > 0  # the limit said no …
            for _ in range(100):  # … and what it left running is gone (killed, reaped)
                if len(sandbox.cgroup.pids()) <= 3:  # bwrap, its init, the supervisor
                    break
                await asyncio.sleep(0.02)
            assert len(sandbox.cgroup.pids()) <= 3

            code, text = await _sh(sandbox, "echo still here")
            assert code == 0 and text.strip() == "still here"

    asyncio.run(scenario())
    assert Path("/proc/self").exists()  # this process (the server's stand-in) is unharmed
