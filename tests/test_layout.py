"""The code's layout rules, checked by reading the source (docs/architecture.md says why).

Where SQL lives: queries are built and run only in `src/nightowl/store/`, beside their tables.
Outside it a module may hold a `Session` (the transaction it was handed) and catch
`sqlalchemy.exc` errors, but it may not import SQLAlchemy's query constructs, the store's
table classes, or run SQL text.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from sqlalchemy import Table

SOURCE = Path(__file__).resolve().parents[1] / "src" / "nightowl"
STORE = SOURCE / "store"

# What a module outside store/ may take from SQLAlchemy: the transaction it is handed, and the
# errors it may have to translate.
ALLOWED_SQLALCHEMY = {"sqlalchemy.orm": {"Session"}, "sqlalchemy.exc": None}  # None: any name

# Modules outside store/ that may use SQL, and why. Each must still need its exception.
EXCEPTIONS = {
    "engine/durable.py": "builds the engine of DBOS's own system database (SQLite pragmas on "
    "connect); that database is DBOS's, not the store's, and holds none of our tables",
    "backup/databases.py": "snapshots and restores whole databases beside pg_dump "
    "(pg_export_snapshot, dropping and recreating schemas): no queries over our tables",
}


@dataclass(frozen=True)
class Breach:
    """One place that breaks the rule."""

    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"src/nightowl/{self.path}:{self.line}: {self.what}"


def _is_table(value: object) -> bool:
    """Whether an object imported from the store is a table (a mapped class or a Table) or a
    module of tables."""
    if isinstance(value, ModuleType):
        return value.__name__.endswith("tables")
    return isinstance(value, Table) or (isinstance(value, type) and hasattr(value, "__table__"))


def _allowed_from_sqlalchemy(module: str, name: str) -> bool:
    for prefix, names in ALLOWED_SQLALCHEMY.items():
        if module == prefix or module.startswith(prefix + "."):
            return names is None or name in names
    return False


def _raw_sql(call: ast.Call) -> bool:
    """`x.execute("...")` or `x.exec_driver_sql(...)`: SQL written as text."""
    if not isinstance(call.func, ast.Attribute):
        return False
    if call.func.attr == "exec_driver_sql":
        return True
    return (
        call.func.attr in {"execute", "executemany", "executescript"}
        and bool(call.args)
        and isinstance(call.args[0], (ast.Constant, ast.JoinedStr))
        and not isinstance(getattr(call.args[0], "value", ""), bytes)
    )


def breaches_in(path: Path, relative: str | None = None) -> list[Breach]:
    """Where the module at `path` builds, imports or runs SQL outside the store."""
    relative = relative or path.relative_to(SOURCE).as_posix()
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Breach] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sqlalchemy" or (
                    alias.name.startswith("nightowl.store.") and alias.name.endswith("tables")
                ):
                    found.append(Breach(relative, node.lineno, f"imports {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module
            if module.split(".")[0] == "sqlalchemy":
                for alias in node.names:
                    if not _allowed_from_sqlalchemy(module, alias.name):
                        what = f"imports {alias.name} from {module}"
                        found.append(Breach(relative, node.lineno, what))
            elif module == "nightowl.store" or module.startswith("nightowl.store."):
                source = importlib.import_module(module)
                for alias in node.names:
                    value = getattr(source, alias.name, None)
                    if value is None:
                        value = importlib.import_module(f"{module}.{alias.name}")
                    if _is_table(value):
                        what = f"imports the table {alias.name} from {module}"
                        found.append(Breach(relative, node.lineno, what))
        elif isinstance(node, ast.Call) and _raw_sql(node):
            found.append(Breach(relative, node.lineno, "runs SQL text"))
    return found


def modules_outside_store() -> list[Path]:
    """Every module of the package but the store's."""
    return sorted(p for p in SOURCE.rglob("*.py") if STORE not in p.parents)


def test_sql_lives_in_the_store() -> None:
    """No module outside store/ builds queries, imports tables or runs SQL text."""
    breaches = [
        breach
        for path in modules_outside_store()
        if path.relative_to(SOURCE).as_posix() not in EXCEPTIONS
        for breach in breaches_in(path)
    ]
    listing = "\n".join(str(b) for b in breaches)
    assert not breaches, (
        f"{len(breaches)} place(s) use SQL outside src/nightowl/store/ (put the query behind "
        f"a function in store/, see docs/architecture.md 'Where SQL lives'):\n{listing}"
    )


def test_each_exception_is_still_needed() -> None:
    """An exception that no longer uses SQL is taken off the list."""
    for relative, reason in EXCEPTIONS.items():
        assert reason
        assert breaches_in(SOURCE / relative), f"{relative} no longer needs its exception"


def test_the_check_sees_a_query(tmp_path: Path) -> None:
    """The check finds each kind of breach (so a passing run means something)."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from sqlalchemy import select, text\n"
        "from sqlalchemy.orm import Session\n"
        "from nightowl.store.tables import Message, utcnow\n"
        "def f(session: Session) -> None:\n"
        "    session.execute(text('SELECT 1'))\n"
        "    session.connection().exec_driver_sql('SELECT 1')\n"
        "    session.execute('SELECT 1')\n"
    )
    found = [(b.line, b.what) for b in breaches_in(sample, "sample.py")]
    assert found == [
        (1, "imports select from sqlalchemy"),
        (1, "imports text from sqlalchemy"),
        (3, "imports the table Message from nightowl.store.tables"),
        (6, "runs SQL text"),
        (7, "runs SQL text"),
    ]
