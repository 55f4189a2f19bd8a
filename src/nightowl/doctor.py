"""`nightowl doctor`: check what this machine and configuration need, and say how to fix it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text

from nightowl.config import Settings
from nightowl.models.select import resolve
from nightowl.store.database import Database
from nightowl.store.migrate import revision_status


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
            session.execute(text("SELECT 1"))
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
            engine = create_engine(url)
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            engine.dispose()
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

        try:
            import llama_cpp  # noqa: F401
        except ImportError:
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
        return Check("model", True, f"local model at {weights_path()}")
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


def _sandbox(_settings: Settings) -> Check:
    missing = [tool for tool in ("bwrap", "setpriv") if shutil.which(tool) is None]
    network = [tool for tool in ("slirp4netns", "pasta") if shutil.which(tool)]
    if missing:
        return Check(
            "sandbox",
            False,
            f"missing {', '.join(missing)}: the bubblewrap sandbox cannot start",
            "apt-get install bubblewrap util-linux",
            required=False,
        )
    detail = "bubblewrap ready" + (f"; egress via {network[0]}" if network else "; no egress tool")
    return Check("sandbox", True, detail)


CHECKS: tuple[Callable[[Settings], Check], ...] = (
    _database,
    _migrations,
    _engine,
    _model,
    _sandbox,
)


def run_checks(settings: Settings) -> list[Check]:
    """Every check, in order."""
    return [check(settings) for check in CHECKS]
