"""`nightowl usage [--days N] [--json]`: what the models cost, per day, conversation, routine
and helper (on the app store directly)."""

from __future__ import annotations

import argparse
import json

from nightowl.cli.client import Commands, load_settings, owner_session


def positive_days(value: str) -> int:
    """A `--days` value: a whole number from 1 to 366."""
    try:
        days = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of days") from None
    if not 1 <= days <= 366:
        raise argparse.ArgumentTypeError("give 1 to 366 days")
    return days


def add_commands(commands: Commands) -> None:
    """Add `usage`."""
    usage = commands.add_parser(
        "usage", help="what the models cost: per day, conversation, routine"
    )
    add_report_options(usage)
    usage.set_defaults(run=run)


def add_report_options(report: argparse.ArgumentParser) -> None:
    """The options of a command that reports on recent days: `--days N` and `--json`."""
    report.add_argument("--days", type=positive_days, default=7, help="today and N-1 days before")
    report.add_argument("--json", action="store_true", help="the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Print the owner's usage report."""
    from nightowl.api.usage import since_days
    from nightowl.store.usage import usage_report

    with owner_session(load_settings()) as (session, owner_id):
        report = usage_report(session, owner_id, since_days(args.days))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    total = report["total"]
    print(
        f"since {report['since'][:10]}: {total['calls']} model calls, ${total['cost_usd']:.4f}, "
        f"{total['input_tokens'] + total['cache_read_tokens'] + total['cache_write_tokens']:,} "
        f"input tokens ({total['cached_share']:.0%} from cache), {total['output_tokens']:,} output"
    )
    if total["unpriced_calls"]:
        print(f"  {total['unpriced_calls']} calls of models without a price (NIGHTOWL_PRICES)")
    sections = (
        ("by_day", "day"),
        ("by_conversation", "title"),
        ("by_routine", "name"),
        ("by_helper", "name"),
    )
    for key, label in sections:
        if report[key]:
            print(f"{key.replace('_', ' ')}:")
        for row in report[key]:
            name = row[label] or row.get("helper_id") or row.get("conversation_id", "")
            print(
                f"  {name[:40]:<40} ${row['cost_usd']:>10.4f}  {row['calls']:>5} calls  "
                f"{row['cached_share']:>4.0%} cached"
            )
    return 0
