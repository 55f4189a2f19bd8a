"""How a table row becomes the plain data the rest of the server reads: a frozen dataclass whose
fields are named like the row's columns. One function instead of a field-by-field copy per
table, so a column added to both the table and its dataclass cannot be forgotten in between."""

from __future__ import annotations

from typing import Any, TypeVar

V = TypeVar("V")


def view_of(cls: type[V], row: object, **computed: Any) -> V:
    """The dataclass `cls` with each field read from the same-named attribute of `row` (an ORM
    object or a result row), except the fields given in `computed` (converted or not stored)."""
    names: dict[str, Any] = cls.__dataclass_fields__  # type: ignore[attr-defined]
    read = {name: getattr(row, name) for name in names if name not in computed}
    return cls(**read, **computed)
