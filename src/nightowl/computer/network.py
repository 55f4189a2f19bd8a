"""Egress-only networking for a sandbox: slirp4netns in user mode, behind a firewall.

Every sandbox has its own network namespace; with the policy `none` it holds only its own
loopback. With `egress`, a user-mode network stack (slirp4netns, confined) connects out
through the host's sockets; `--disable-host-loopback` keeps the host's 127.0.0.1 services
(PostgreSQL, Redis, the server itself) out of reach, and nftables rules root sets in the
namespace before the sandbox starts (it has no capability to change them) refuse the host's
own addresses, private and link-local networks (the LAN, cloud metadata at 169.254.169.254).
gVisor's netstack writes whole frames through a packet socket, past the `inet` hooks, so for
it the same ranges are refused on the device itself (`device_firewall_rules`).
"""

from __future__ import annotations

import functools
import json
import os
import select
import shutil
import subprocess

from nightowl.computer.sandbox import SandboxError

READY_TIMEOUT_S = 5.0


# Never reachable from a sandbox: this host, private, shared, link-local, reserved ranges.
BLOCKED_V4 = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/3",
)
SLIRP_DNS = "10.0.2.3"


def egress_problems() -> list[str]:
    """Why egress networking cannot work here (empty when it can)."""
    found = []
    if shutil.which("slirp4netns") is None:
        found.append("slirp4netns is missing (apt-get install slirp4netns)")
    if shutil.which("nft") is None:
        found.append("nft is missing (apt-get install nftables)")
    return found


@functools.cache
def host_addresses() -> tuple[str, ...]:
    """This host's own IPv4 addresses (a sandbox must not reach its services on them)."""
    try:
        shown = subprocess.run(
            ["ip", "-j", "-4", "addr"], capture_output=True, text=True, timeout=5, check=True
        )
        interfaces = json.loads(shown.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return ()
    return tuple(
        info["local"] for interface in interfaces for info in interface.get("addr_info", ())
    )


def firewall_rules() -> bytes:
    """nftables rules for a sandbox's network namespace: out to the internet only."""
    blocked = ", ".join((*BLOCKED_V4, *host_addresses()))
    return f"""table inet nightowl {{
  chain output {{
    type filter hook output priority 0; policy accept;
    oifname "lo" accept
    ip daddr {SLIRP_DNS} udp dport 53 accept
    ip daddr {SLIRP_DNS} tcp dport 53 accept
    ip daddr {{ {blocked} }} reject with icmp type admin-prohibited
    meta nfproto ipv6 reject
  }}
}}
""".encode()


def device_firewall_rules(device: str = "tap0") -> bytes:
    """nftables rules on the way out of the namespace's device itself (netdev egress).

    They see every frame sent on `device`, also those a user-space network stack writes
    through a packet socket (gVisor's netstack), which the `inet` output hook never sees.
    Only ARP and IPv4 pass, and not to the ranges `firewall_rules` refuses; the netdev family
    cannot reject on egress, so a refused connection is dropped (it times out)."""
    blocked = ", ".join((*BLOCKED_V4, *host_addresses()))
    return f"""table netdev nightowl {{
  chain egress {{
    type filter hook egress device "{device}" priority 0; policy accept;
    meta protocol arp accept
    meta protocol != ip drop
    ip daddr {SLIRP_DNS} udp dport 53 accept
    ip daddr {SLIRP_DNS} tcp dport 53 accept
    ip daddr {{ {blocked} }} drop
  }}
}}
""".encode()


def guard_device(namespace_pid: int, device: str = "tap0") -> None:
    """Put `device_firewall_rules` on `device` in the network namespace of `namespace_pid`."""
    try:
        subprocess.run(
            ["nsenter", f"--net=/proc/{namespace_pid}/ns/net", "--", "nft", "-f", "-"],
            input=device_firewall_rules(device),
            capture_output=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", b"") or b""
        raise SandboxError(
            f"the sandbox's firewall could not be set: {error} {detail.decode(errors='replace')}"
        ) from error


def start_egress(sandbox_pid: int) -> subprocess.Popen[bytes]:
    """Give the sandbox's network namespace (by the host pid of a process in it) a route out.

    slirp4netns runs in its own mount namespace with only CAP_NET_BIND_SERVICE and a seccomp
    filter (`--enable-sandbox --enable-seccomp`).
    """
    ready_read, ready_write = os.pipe()
    argv = [
        "slirp4netns",
        "--configure",
        "--mtu=65520",
        "--disable-host-loopback",
        "--enable-sandbox",
        "--enable-seccomp",
        f"--ready-fd={ready_write}",
        str(sandbox_pid),
        "tap0",
    ]
    try:
        process = subprocess.Popen(
            argv,
            pass_fds=(ready_write,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    finally:
        os.close(ready_write)
    try:
        ready, _, _ = select.select([ready_read], [], [], READY_TIMEOUT_S)
        if not ready or os.read(ready_read, 1) != b"1":
            process.kill()
            _, errors = process.communicate(timeout=5)
            raise SandboxError(
                f"the sandbox's network did not come up: {errors.decode(errors='replace')[:500]}"
            )
    finally:
        os.close(ready_read)
    return process
