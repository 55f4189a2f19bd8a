"""The gVisor backend with the real runsc (tests run as root): the same contract as bubblewrap,
what `problems()` says when it cannot work, and what `nightowl doctor` reports."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nightowl.computer.backends import choose_backend
from nightowl.computer.cgroups import Limits, detect
from nightowl.computer.gvisor import STATX_NOTE, GvisorBackend
from nightowl.computer.sandbox import Network, Sandbox, SandboxError, SandboxSpec
from nightowl.config import Settings
from nightowl.doctor import run_checks
from tests.netns_hosts import (
    PROBE,
    NetnsHost,
    host_in_netns,
    outside_stand_in,
    refused_ranges_sample,
)
from tests.server import NIGHTOWL

UID = 3_900_001 + os.getpid() % 1000  # apart per test process


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"  # tmp_path's parents are closed to the uid: runsc binds as root
    home.mkdir()
    os.chown(home, UID, UID)
    os.chmod(home, 0o700)
    return home


@contextmanager
def gvisor_sandbox(
    tmp_path: Path, network: Network = "none", layout: str | None = "detect"
) -> Iterator[Sandbox]:
    """A started gVisor sandbox over a fresh home; stopped after."""
    spec = SandboxSpec(
        name=f"gvtest-{os.getpid()}",
        uid=UID,
        home=_home(tmp_path),
        limits=Limits(512 * 2**20, 1.0, 256),
        network=network,
        cgroup_layout=detect() if layout == "detect" else layout,
    )
    sandbox = GvisorBackend().start(spec)
    try:
        yield sandbox
    finally:
        sandbox.stop()


async def _sh(sandbox: Sandbox, command: str, timeout_s: float = 20) -> tuple[int | None, str]:
    result = await sandbox.run(command, output="out.log", timeout_s=timeout_s)
    text = (await sandbox.call({"op": "read", "path": "out.log"}))["text"]
    return result.exit_code, str(text)


def _leftovers(name: str) -> list[str]:
    ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True)
    return [line for line in ps.stdout.splitlines() if name in line and "runsc" in line]


def test_works_here() -> None:
    assert GvisorBackend().problems() == []  # runsc 20221219 runs on this machine


def test_runs_as_the_users_uid_on_gvisor_with_a_read_only_system(tmp_path: Path) -> None:
    async def scenario(sandbox: Sandbox) -> None:
        code, text = await _sh(sandbox, "id -u; id -g; uname -r; cat /etc/shadow")
        uid, gid, release = text.split()[:3]
        assert (uid, gid) == (str(UID), str(UID))
        assert release != os.uname().release  # gVisor's kernel answers, not the host's
        assert code != 0 and "Permission denied" in text

        for target in ("/usr/evil", "/etc/evil", "/evil", "/home/evil", "/bin/evil"):
            code, text = await _sh(sandbox, f"touch {target}")
            assert code != 0, f"could write {target}: {text}"
        assert not Path("/usr/evil").exists() and not Path("/etc/evil").exists()
        code, _ = await _sh(sandbox, "touch /tmp/scratch /var/tmp/scratch")
        assert code == 0

        code, _ = await _sh(sandbox, "echo from inside > ~/made.txt; mkdir -p ~/deep/er")
        made = sandbox.spec.home / "made.txt"
        assert code == 0 and made.read_text() == "from inside\n"
        assert (os.stat(made).st_uid, os.stat(made).st_gid) == (UID, UID)
        assert os.stat(sandbox.spec.home / "deep" / "er").st_uid == UID

        code, text = await _sh(
            sandbox, "grep Cap /proc/self/status; cd /home && ls; cat /etc/passwd"
        )
        caps = [line for line in text.splitlines() if line.startswith("Cap")]
        assert caps and all(line.endswith("0000000000000000") for line in caps)
        assert "agent" in text.split() and f"agent:x:{UID}:{UID}" in text
        assert "root:x:0:0" in text and "nobody" not in text  # our passwd, not the host's

        # File operations go through descriptors passed into gVisor (SCM_RIGHTS).
        await sandbox.call({"op": "write", "path": "notes/a.txt", "content": "written"})
        assert (await sandbox.call({"op": "read", "path": "notes/a.txt"}))["text"] == "written"
        code, text = await _sh(sandbox, "ls -l ~/notes")
        if STATX_NOTE in GvisorBackend().notes():  # the known gap of this runsc
            assert code != 0 and "Invalid argument" in text
        else:
            assert code == 0 and "a.txt" in text

    with gvisor_sandbox(tmp_path) as sandbox:
        assert sandbox.backend == "gvisor"
        asyncio.run(scenario(sandbox))


@pytest.mark.parametrize("layout", ["detect", None], ids=["cgroup", "no-cgroup"])
def test_freeze_thaw_and_a_stop_that_leaves_nothing(tmp_path: Path, layout: str | None) -> None:
    async def scenario(sandbox: Sandbox) -> None:
        await sandbox.call({"op": "ping"})
        sandbox.freeze()
        answer = asyncio.ensure_future(sandbox.call({"op": "ping"}))
        await asyncio.sleep(0.5)
        assert not answer.done()  # frozen: nothing runs inside
        sandbox.thaw()
        assert (await asyncio.wait_for(answer, 10))["ok"]
        if layout is None:  # RLIMIT_AS, enforced by gVisor itself
            code, text = await _sh(sandbox, "python3 -c 'x = bytearray(2 * 1024 ** 3)'")
            assert code != 0 and "MemoryError" in text
        sandbox.freeze()  # stopping a frozen sandbox works too

    with gvisor_sandbox(tmp_path, layout=layout) as sandbox:
        assert (sandbox.cgroup is None) == (layout is None)
        asyncio.run(scenario(sandbox))
        name = sandbox.spec.name
        assert _leftovers(name)
    assert _leftovers(name) == [] and not sandbox.alive()
    assert not (GvisorBackend().state_dir / "bundles" / name).exists()


def test_egress_through_gvisors_netstack_but_not_to_the_host_or_private_networks(
    tmp_path: Path,
) -> None:
    """gVisor's netstack sends frames past the `inet` hooks; the device's own rules refuse
    the host, private, shared and link-local ranges all the same (each a test host of ours)."""
    host_ip = _host_address()
    listener = socket.create_server(("0.0.0.0", 0))  # a host service on every address
    port = listener.getsockname()[1]
    loopback = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=_greet, args=(listener,), daemon=True).start()
    outside = outside_stand_in()

    async def scenario(sandbox: Sandbox, host: NetnsHost) -> None:
        await sandbox.call({"op": "write", "path": "probe.py", "content": PROBE})
        refused = [f"{address}:{host.port}" for address in host.addresses if address != outside]
        refused += [f"{host_ip}:{port}", f"10.0.2.2:{loopback.getsockname()[1]}"]
        allowed = f"{outside}:{host.port}"
        command = f"python3 probe.py {allowed} {' '.join(refused)}; ip -4 addr"
        code, text = await _sh(sandbox, command, timeout_s=30)
        assert code == 0, text
        assert f"{allowed} open hello from the test host" in text  # out through slirp4netns
        for target in refused:
            assert f"{target} refused" in text, text
        assert "10.0.2.100" in text
        assert host.contacts() == [outside]  # no refused packet reached the test host

    try:
        with host_in_netns(tmp_path, (*refused_ranges_sample(), outside)) as host:
            (tmp_path / "sandbox").mkdir()
            with gvisor_sandbox(tmp_path / "sandbox", network="egress") as sandbox:
                asyncio.run(scenario(sandbox, host))
    finally:
        listener.close()
        loopback.close()


def _host_address() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.connect(("192.0.2.123", 9))  # no packet is sent: only the route is looked up
        address: str = udp.getsockname()[0]
    if address.startswith("127."):
        pytest.skip("this machine has no non-loopback address to reach")
    return address


def _greet(listener: socket.socket) -> None:
    with contextlib.suppress(OSError):
        connection, _ = listener.accept()
        with connection:
            connection.sendall(b"hello")


def test_problems_say_runsc_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no runsc (nor anything else) on it
    problems = GvisorBackend().problems()
    assert any("runsc is missing" in problem for problem in problems), problems
    with pytest.raises(SandboxError, match="the gvisor sandbox cannot run here: runsc is missing"):
        choose_backend("gvisor")
    spec = SandboxSpec("gvmissing", UID, _home(tmp_path), Limits(2**28, 1.0, 64))
    with pytest.raises(SandboxError, match="runsc is missing"):
        GvisorBackend().start(spec)


def test_doctor_names_each_backend_and_why_not(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", sandbox_backend="gvisor")
    checks = {check.name: check for check in run_checks(settings)}
    for name in ("backend bubblewrap", "backend gvisor", "cgroups", "egress", "desktop"):
        assert checks[name].ok, checks[name]
    assert checks["backend gvisor"].required and not checks["backend bubblewrap"].required
    assert checks["sandbox"].detail.startswith("gvisor")
    assert checks["cgroups"].detail.startswith(("v1", "v2"))

    env = {**os.environ, "NIGHTOWL_DATA_DIR": str(tmp_path / "data")}
    subprocess.run([NIGHTOWL, "token", "list"], env=env, check=True, capture_output=True)
    no_runsc = {**env, "PATH": str(tmp_path), "NIGHTOWL_SANDBOX_BACKEND": "gvisor"}
    doctor = subprocess.run([NIGHTOWL, "doctor"], env=no_runsc, capture_output=True, text=True)
    assert doctor.returncode == 1, doctor.stdout  # the configured backend cannot run
    assert "[FAIL] backend gvisor: runsc is missing" in doctor.stdout
    assert "[FAIL] sandbox: gvisor" in doctor.stdout
    assert "[warn] backend bubblewrap: bwrap is missing" in doctor.stdout  # not configured

    auto = subprocess.run([NIGHTOWL, "doctor"], env=env, capture_output=True, text=True)
    assert auto.returncode == 0, auto.stdout
    assert "[ok  ] sandbox: auto chose bubblewrap" in auto.stdout
    assert "[ok  ] backend gvisor: works here" in auto.stdout
