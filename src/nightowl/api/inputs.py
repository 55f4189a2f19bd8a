"""What the API accepts: text, ids and numbers are checked once, here, at the edge.

Every text field of a request body, query or path is `SafeText` or built on it: well-formed
Unicode (a lone surrogate cannot be encoded, so no store can keep it), no NUL character
(PostgreSQL cannot store one; SQLite could, so both refuse it and a request behaves the same on
either), and a length limit declared with the field. Ids in paths and queries are `Id`. Every
number that reaches a column fits in 64 bits (`MAX_INT64`), so the store never sees one it
cannot compare. Whatever fails answers 422 naming the field (see api/errors.py).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path
from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints
from pydantic_core import PydanticCustomError

MAX_INT64 = 2**63 - 1
# What an id of ours looks like (`conv_3f9a…`, `turn-…`); anything else cannot name a row.
ID_PATTERN = r"^[A-Za-z0-9._:\-]+$"
MAX_ID_CHARS = 200
SECRET_NAME_PATTERN = r"^[A-Za-z0-9_.\-]+$"
# A connector's name prefixes its tools' names (`<name>_<tool>`): one lowercase word.
CONNECTOR_NAME_PATTERN = r"^[a-z][a-z0-9]{0,39}$"
CHANNEL_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,39}$"
# How a validation error says what a pattern wants (api/errors.py).
PATTERN_WORDS = {
    ID_PATTERN: f"must be 1-{MAX_ID_CHARS} letters, digits, '.', '_', ':' or '-'",
    SECRET_NAME_PATTERN: "must be 1-100 letters, digits, '_', '.' or '-'",
    CHANNEL_NAME_PATTERN: (
        "must be 1-40 lowercase letters, digits, '_' or '-', starting with a letter"
    ),
    CONNECTOR_NAME_PATTERN: (
        "must be 1-40 lowercase letters, digits, starting with a letter "
        "(its tools are called <name>_<tool>)"
    ),
}


def text_problem(value: str) -> tuple[str, str, dict[str, object]] | None:
    """Why `value` cannot be stored as text (error type, message template, context), or None."""
    if "\x00" in value:
        return (
            "nul_character",
            "contains a NUL character (U+0000) at position {at}; remove it",
            {"at": value.index("\x00")},
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        return (
            "lone_surrogate",
            "is not well-formed Unicode: a lone surrogate (U+{code}) at position {at}; "
            "send valid UTF-8 text",
            {"code": f"{ord(value[error.start]):04X}", "at": error.start},
        )
    return None


def describe_text_problem(value: str) -> str | None:
    """`text_problem` as a sentence ("contains a NUL character …"), or None."""
    problem = text_problem(value)
    if problem is None:
        return None
    _, template, context = problem
    return template.format(**context)


def well_formed_text(value: str) -> str:
    """`value` unchanged when it is storable text; otherwise a validation error saying why."""
    problem = text_problem(value)
    if problem is not None:
        raise PydanticCustomError(*problem)
    return value


WELL_FORMED = AfterValidator(well_formed_text)
"""The check behind `SafeText`, for types that add constraints before it."""

SafeText = Annotated[str, WELL_FORMED]
"""Text a store can keep: the one type behind every text field of the API. (Types built on
it list their constraints first and this check last: pydantic leaves a `pattern` out of the
schema when it comes after a validator.)"""

Id = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN),
    WELL_FORMED,
]
"""An id of a stored thing (in a body or a query)."""

PathId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_ID_CHARS,
        pattern=ID_PATTERN,
        description="An id as the API returned it (letters, digits, . _ : -).",
    ),
    WELL_FORMED,
]
"""An id in a route's path."""


class RequestBody(BaseModel):
    """A JSON request body: each field is taken as the JSON type it declares, never coerced
    (`"1"` is no number, `0` no boolean), so what the schema refuses the API refuses too."""

    model_config = ConfigDict(strict=True)


SecretName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=100,
        pattern=SECRET_NAME_PATTERN,
        description="1-100 letters, digits, '_', '.' or '-'.",
    ),
    WELL_FORMED,
]
"""A secret's name in a route's path."""


ConnectorName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=40, pattern=CONNECTOR_NAME_PATTERN),
    WELL_FORMED,
]
"""A connector's name in a body."""

PathConnectorName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=40,
        pattern=CONNECTOR_NAME_PATTERN,
        description="1-40 lowercase letters and digits, starting with a letter.",
    ),
    WELL_FORMED,
]
"""A connector's name in a route's path."""

ChannelName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=40, pattern=CHANNEL_NAME_PATTERN),
    WELL_FORMED,
]
"""A channel's name in a body."""
