"""The sandbox backends this server knows, and the choice among them."""

from __future__ import annotations

from nightowl.computer.bubblewrap import BubblewrapBackend
from nightowl.computer.gvisor import GvisorBackend
from nightowl.computer.sandbox import Backend, SandboxError

# The backend of a worker whose computers are on a computer tier: nothing runs here.
REMOTE = "remote"


def known_backends() -> dict[str, Backend]:
    """Every backend by name, in the order 'auto' tries them (bubblewrap first; gVisor, the
    stronger isolation, only by name or where bubblewrap cannot run)."""
    return {"bubblewrap": BubblewrapBackend(), "gvisor": GvisorBackend()}


def choose_backend(name: str) -> Backend:
    """The named backend, or with 'auto' the first that works here; SandboxError if none."""
    if name == REMOTE:
        raise SandboxError(
            "this server's computers run on a computer tier, which does not serve the browser, "
            "the desktop or MCP servers inside the computer yet"
        )
    backends = known_backends()
    if name != "auto":
        if name not in backends:
            raise SandboxError(
                f"unknown sandbox backend {name!r}; use auto or one of: {', '.join(backends)}"
            )
        problems = backends[name].problems()
        if problems:
            raise SandboxError(f"the {name} sandbox cannot run here: {'; '.join(problems)}")
        return backends[name]
    reasons = []
    for backend in backends.values():
        problems = backend.problems()
        if not problems:
            return backend
        reasons.append(f"{backend.name}: {'; '.join(problems)}")
    raise SandboxError("no sandbox backend works here (" + " | ".join(reasons) + ")")
