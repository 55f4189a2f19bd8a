"""What the OpenAPI document declares beyond what FastAPI infers: every error an operation can
answer, in the common error shape (clients and the schema-driven tests rely on it)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from nightowl.api.errors import ErrorOut, error_responses

_REF = "#/components/schemas/{model}"


def declare_errors(app: FastAPI) -> None:
    """Have `app.openapi()` declare in every operation the errors any route of its kind can
    answer: 401 where a token is needed, 404 where the path names a thing, 400 where a body is
    parsed, 422 where there is input. Route-specific ones (403, 409) are declared with the
    route (`responses=error_responses(...)`). Every operation but /healthz may answer 429, one
    with a body 413 (api/edge.py), and every one 503 while the database is unreachable (each
    reads it, /healthz too); 429 and 503 say when to retry in `Retry-After`."""
    infer = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            _add_errors(infer())
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _add_errors(document: dict[str, Any]) -> None:
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    shape = ErrorOut.model_json_schema(ref_template=_REF)
    schemas.update(shape.pop("$defs", {}))
    schemas["ErrorOut"] = shape
    for path, methods in document["paths"].items():
        for operation in methods.values():
            responses = operation.setdefault("responses", {})
            for status, answer in _errors_of(path, operation).items():
                if str(status) not in responses or "ValidationError" in str(responses[str(status)]):
                    responses[str(status)] = answer
                elif "headers" in answer:  # declared by the route: the retry header still holds
                    responses[str(status)].setdefault("headers", answer["headers"])
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)


def _errors_of(path: str, operation: dict[str, Any]) -> dict[int, dict[str, Any]]:
    where = {parameter["in"] for parameter in operation.get("parameters", [])}
    statuses = []
    if operation.get("security"):
        statuses.append(401)
    if "path" in where:
        statuses.append(404)
    if "requestBody" in operation:
        statuses += [400, 413]
    if where or "requestBody" in operation:
        statuses.append(422)
    if path != "/healthz":  # the edge's rate limits (api/edge.py)
        statuses.append(429)
    statuses.append(503)  # the database went away (api/errors.py): the same request again
    answers: dict[int, dict[str, Any]] = {
        status: {
            "description": answer["description"],
            "content": {"application/json": {"schema": {"$ref": _REF.format(model="ErrorOut")}}},
        }
        for status, answer in error_responses(*statuses).items()
        if isinstance(status, int)
    }
    for status in (429, 503):
        if status in answers:
            answers[status]["headers"] = {
                "Retry-After": {
                    "description": "Seconds to wait before trying again.",
                    "required": True,
                    "schema": {"type": "integer", "minimum": 1},
                }
            }
    return answers
