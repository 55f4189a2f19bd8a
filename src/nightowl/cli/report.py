"""`nightowl report [--days N] [--json]`: the autonomy report, what the agent did without
asking and what it held for you, and spending by source (on the app store directly)."""

from __future__ import annotations

import argparse
import json

from nightowl.cli.client import Commands, load_settings, owner_session
from nightowl.cli.usage import add_report_options


def add_commands(commands: Commands) -> None:
    """Add `report`."""
    report = commands.add_parser(
        "report",
        help="the autonomy report: actions without asking, held, answered; spending by source",
    )
    add_report_options(report)
    report.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the owner's autonomy report, a row per UTC day and the total."""
    from nightowl.api.report import report_of

    with owner_session(load_settings()) as (session, owner_id):
        report = report_of(session, owner_id, args.days)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"since {report['first_day']} (UTC days):")
    print(
        f"{'day':<12} {'without asking':>14}  held  approved  denied  expired  answer  "
        f"{'tokens':>8}  {'cost':>11}"
    )
    for row in [*report["days"], {"day": "total", **report["total"]}]:
        a = row["actions"]
        answer = row["median_answer_s"]
        print(
            f"{row['day']:<12} {a['without_asking']:>14}  {a['held']:>4}  {a['approved']:>8}  "
            f"{a['denied']:>6}  {a['expired']:>7}  "
            f"{'-' if answer is None else f'{answer:.0f} s':>6}  {row['tokens']:>8,}  "
            f"${row['cost_usd']:>10.4f}"
        )
    spent = {k: v for k, v in report["total"]["by_source"].items() if v["tokens"]}
    if spent:
        print("by source:")
    for source, money in spent.items():
        print(f"  {source:<12} {money['tokens']:>10,} tokens  ${money['cost_usd']:>10.4f}")
    return 0
