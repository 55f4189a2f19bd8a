"""Imports point inward: a package imports only packages of a lower layer (or its own layer's
nothing: packages on one layer do not import each other). The layers are the map in
docs/architecture.md; a new package is placed there and here."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "nightowl"

# Inner to outer. Each entry: the packages (or top-level modules) of one layer.
LAYERS: list[set[str]] = [
    {"messages"},  # the vocabulary every package exchanges
    {"harness"},  # pure decisions over that vocabulary
    {"store", "models", "tracing", "metrics", "logs"},  # SQL; model adapters; telemetry
    {"config"},  # the Settings object (validates prices and trace targets)
    {"safety"},  # rules, the reviewer, the vault
    {"memory", "computer"},  # what the agent remembers; its sandboxed computer
    {"tools"},  # what the agent can call
    {"evals"},  # eval cases and the failures flagged as cases
    {"router"},  # every trigger becomes an IncomingMessage
    {"channels"},  # where owners live
    {"engine"},  # the durable turn: DBOS workflows and steps
    {"doctor"},  # checks of a deployment
    {"api"},  # HTTP routes
    {"services"},  # the parts of a server, built in named stages
    {"app"},  # the composition root: the API around the services
    {"backup"},  # backup and restore (builds the app's parts)
    {"cli"},  # the command line
]


def _layer_of(name: str) -> int:
    for index, layer in enumerate(LAYERS):
        if name in layer:
            return index
    raise AssertionError(
        f"nightowl.{name} is on no layer: add it to LAYERS in tests/test_import_layers.py "
        "and to the map in docs/architecture.md"
    )


def _package_of(path: Path) -> str:
    parts = path.relative_to(SRC).parts
    return parts[0].removesuffix(".py")


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "nightowl" and len(parts) > 1:
                found.append((node.lineno, parts[1]))
    return found


def test_every_import_points_inward() -> None:
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "__init__.py" or (path.name == "__main__.py" and path.parent == SRC):
            continue
        own = _package_of(path)
        for line, target in _imported(ast.parse(path.read_text())):
            if target != own and _layer_of(target) >= _layer_of(own):
                wrong.append(f"{path.relative_to(SRC.parent)}:{line} imports nightowl.{target}")
    assert not wrong, "imports that point outward (or sideways):\n" + "\n".join(wrong)


def test_the_layer_check_catches_an_outward_import(tmp_path: Path) -> None:
    tree = ast.parse("from nightowl.engine.turn import x\nimport nightowl.store.tables\n")
    found = _imported(tree)
    assert found == [(1, "engine"), (2, "store")]
    assert _layer_of("engine") > _layer_of("harness")  # harness importing engine is caught
