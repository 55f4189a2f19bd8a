"""`nightowl evals list|show|mark|edit|run`: the eval cases from the terminal, on the store
directly (like `nightowl hooks`); `run` replays cases on a model and prints what changed."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable

from nightowl.cli.client import Commands, load_settings, open_store, print_error
from nightowl.config import Settings
from nightowl.evals.cases import SHIPPED_PREFIX, CaseError, Checker, EvalCase, load_shipped
from nightowl.evals.starter import STARTER_DIR
from nightowl.store.database import Database
from nightowl.store.errors import StoreError


def add_commands(commands: Commands) -> None:
    """Add `evals` and its subcommands."""
    evals = commands.add_parser("evals", help="eval cases made from failures; replay them")
    sub = evals.add_subparsers(dest="evals_command", required=True)
    listing = sub.add_parser("list", help="your cases and the shipped starter set")
    listing.add_argument("--json", action="store_true")
    show = sub.add_parser("show", help="one case with its checker")
    show.add_argument("id")
    mark = sub.add_parser("mark", help="mark an agent message wrong: a draft case")
    mark.add_argument("conversation")
    mark.add_argument("message")
    mark.add_argument("expected", help="what should have happened")
    edit = sub.add_parser("edit", help="replace a case's checker, keep or drop it")
    edit.add_argument("id")
    edit.add_argument("--checker", help="the checker as JSON (replaces the old one)")
    edit.add_argument("--status", choices=("draft", "kept", "dropped"))
    replay = sub.add_parser("run", help="replay cases on a model and score them")
    replay.add_argument(
        "--model", help="the model (NIGHTOWL_MODEL's syntax); default: the server's"
    )
    replay.add_argument("--judge", help="a model that judges rubrics (none: rubrics not judged)")
    replay.add_argument("--case", action="append", help="only this case (repeatable)")
    replay.add_argument("--shipped", action="store_true", help="only the shipped starter set")
    replay.add_argument("--limit", type=int, help="only the first N cases")
    replay.add_argument("--json", action="store_true")

    evals.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Carry out one `evals` subcommand on the store; 2 with the reason when refused."""
    settings = load_settings()
    try:
        with open_store(settings) as database:
            return _COMMANDS[args.evals_command](args, settings, database)
    except (StoreError, CaseError) as error:
        return print_error("evals", error)


def _owner_id(database: Database) -> str:
    from nightowl.store.users import ensure_owner

    with database.write() as session:
        return ensure_owner(session).id


def _all_cases(database: Database, owner_id: str, include_drafts: bool) -> list[EvalCase]:
    from nightowl.store.evals import list_cases

    with database.read() as session:
        stored = list_cases(session, owner_id)
    mine = [
        EvalCase.from_dict(info.case_data())
        for info in stored
        if info.status == "kept" or (include_drafts and info.status == "draft")
    ]
    return [*mine, *load_shipped(STARTER_DIR)]


def _list(args: argparse.Namespace, settings: Settings, database: Database) -> int:
    from nightowl.store.evals import list_cases

    owner_id = _owner_id(database)
    with database.read() as session:
        stored = list_cases(session, owner_id)
    rows = [(i.id, i.status, i.source, i.title) for i in stored]
    rows += [(c.id, "kept", "shipped", c.title) for c in load_shipped(STARTER_DIR)]
    if args.json:
        print(
            json.dumps(
                [dict(zip(("id", "status", "source", "title"), r, strict=True)) for r in rows],
                indent=2,
            )
        )
        return 0
    for case_id, status, source, title in rows:
        print(f"{case_id:<34} {status:<8} {source:<16} {title[:60]}")
    return 0


def _show(args: argparse.Namespace, settings: Settings, database: Database) -> int:
    from nightowl.store.evals import get_case

    shipped = {c.id: c for c in load_shipped(STARTER_DIR)}
    for name in (args.id, SHIPPED_PREFIX + args.id):
        if name in shipped:
            print(json.dumps(shipped[name].to_dict(), indent=2))
            return 0
    owner_id = _owner_id(database)  # its own transaction, before the next one begins
    with database.read() as session:
        info = get_case(session, args.id, owner_id)
    print(json.dumps(info.case_data(), indent=2, default=str))
    return 0


def _mark(args: argparse.Namespace, settings: Settings, database: Database) -> int:
    from nightowl.evals.capture import mark_wrong
    from nightowl.safety.vault import load_key

    owner_id = _owner_id(database)
    key = load_key(settings.data_dir, settings.secret_key)
    with database.write() as session:
        info = mark_wrong(
            session,
            owner_id=owner_id,
            conversation_id=args.conversation,
            message_id=args.message,
            expected=args.expected,
            vault_key=key,
        )
    print(f"draft case {info.id}: {info.title}")
    print(f"  its checker: {json.dumps(info.checker)}")
    print(f"  edit it with `nightowl evals edit {info.id} --checker '…' --status kept`")
    return 0


def _edit(args: argparse.Namespace, settings: Settings, database: Database) -> int:
    from nightowl.store.evals import update_case

    try:
        given = json.loads(args.checker) if args.checker else None
    except ValueError as error:
        raise CaseError(f"--checker is not JSON: {error}") from None
    checker = Checker.from_dict(given).to_dict() if given is not None else None
    owner_id = _owner_id(database)  # its own transaction, before the next one begins
    with database.write() as session:
        info = update_case(session, args.id, owner_id, checker=checker, status=args.status)
    print(f"{info.id}: {info.status}; checker {json.dumps(info.checker)}")
    return 0


def _run(args: argparse.Namespace, settings: Settings, database: Database) -> int:
    from nightowl.evals.runner import run_cases
    from nightowl.models.base import ClosableModel
    from nightowl.models.pricing import PriceTable
    from nightowl.models.select import build_model

    cases = (
        load_shipped(STARTER_DIR)
        if args.shipped
        else _all_cases(database, _owner_id(database), include_drafts=bool(args.case))
    )
    if args.case:
        wanted = set(args.case)
        cases = [c for c in cases if c.id in wanted or c.id.removeprefix("shipped:") in wanted]
        missing = wanted - {c.id for c in cases} - {c.id.removeprefix("shipped:") for c in cases}
        if missing:
            raise CaseError(f"no case {sorted(missing)}")
    cases = cases[: args.limit] if args.limit else cases
    model = build_model(args.model or settings.model, settings.local_model)
    judge = build_model(args.judge) if args.judge else None
    if model is None:
        raise CaseError("no model to run on (NIGHTOWL_MODEL=none); pass --model")
    try:
        report = asyncio.run(
            run_cases(database, cases, model, prices=PriceTable(settings.prices), judge=judge)
        )
    finally:
        for used in (model, judge):
            if isinstance(used, ClosableModel):
                used.close()
    found = report.to_dict()
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for result in found["results"]:
        mark = "PASS" if result["passed"] else "FAIL"
        failing = [c["check"] for c in result["checks"] if c["passed"] is False]
        why = result["error"] or "; ".join(failing)
        print(f"{mark} {result['case']:<40} {why[:80]}")
    cost = "unpriced" if found["cost_usd"] is None else f"${found['cost_usd']:.4f}"
    print(
        f"{found['passed']}/{found['cases']} passed on {found['model']} in "
        f"{found['seconds']} s, {found['tokens']} tokens, {cost}"
    )
    for label in ("fixed", "regressed"):
        if found[label]:
            print(f"{label} since the last run: {', '.join(found[label])}")
    return 0


_COMMANDS: dict[str, Callable[[argparse.Namespace, Settings, Database], int]] = {
    "list": _list,
    "show": _show,
    "mark": _mark,
    "edit": _edit,
    "run": _run,
}
