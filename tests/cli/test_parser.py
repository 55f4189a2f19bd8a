"""The `nightowl` parser: every command, however deep, runs a function of its group's module."""

from __future__ import annotations

import argparse
import inspect

from nightowl.cli import parser


def _commands(
    command: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = [(path, command)]
    for action in command._actions:  # argparse names its subcommands nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, (*path, name))
    return found


def test_every_command_runs_a_function_of_the_cli_package() -> None:
    runners = {path: sub.get_default("run") for path, sub in _commands(parser()) if path}
    assert {path[0] for path in runners} >= {"serve", "memory", "evals", "restore", "inbox"}
    for path, run in runners.items():
        if run is None:  # a subcommand runs its group's function
            run = runners[path[:1]]
        assert inspect.isfunction(run), (path, run)
        assert run.__module__.startswith("nightowl.cli."), (path, run.__module__)
