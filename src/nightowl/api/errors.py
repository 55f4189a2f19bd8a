"""One error shape for every route: `{"error": {"code", "message"}}`, saying what to do."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from nightowl.api.inputs import PATTERN_WORDS
from nightowl.store.errors import Conflict, Invalid, NotFound
from nightowl.store.outages import lost_connection


class ApiError(Exception):
    """An error answered to the client as is."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


# A PostgreSQL restart: the request's transaction rolled back; sent again with the same
# client_id, a message is stored once.
RETRY_SOON = {"Retry-After": "1"}


def database_unavailable() -> ApiError:
    """The database connection was lost or could not be made: worth the same request again."""
    return ApiError(
        503,
        "database_unavailable",
        "the database is unreachable for a moment; send the same request again",
    )


class ErrorDetail(BaseModel):
    """What went wrong: a stable `code` and a `message` that says what to do."""

    code: str
    message: str


class ErrorOut(BaseModel):
    """The shape of every error answer."""

    error: ErrorDetail


_MEANING = {
    400: "Malformed request: the body is not valid JSON, or a header is missing or malformed.",
    401: "No access token, or one that is unknown or revoked (or a bad webhook signature).",
    403: "Only the owner may do this.",
    404: "No such thing of yours.",
    409: "The thing is no longer in a state that allows this.",
    413: "The request is larger than the limit the message names.",
    422: "A field is invalid; the message names it and says why.",
    429: "Too many requests; retry after the seconds in Retry-After.",
    503: "Temporarily unavailable; try again.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these error statuses, each in the common error shape."""
    return {status: {"model": ErrorOut, "description": _MEANING[status]} for status in statuses}


def _answer(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    if status == 503:  # every 503 is worth the same request again soon
        headers = {**RETRY_SOON, **(headers or {})}
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The answer to an ApiError, for code that runs outside the routes (middleware)."""
    return _answer(error.status, error.code, error.message, headers)


def _describe(errors: list[dict[str, object]]) -> str:
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"  # type: ignore[attr-defined]
        message = error.get("msg")
        if error.get("type") == "string_unicode":  # pydantic's word for a lone surrogate
            message = "is not well-formed Unicode (a lone surrogate); send valid UTF-8 text"
        if error.get("type") == "string_pattern_mismatch":
            pattern = str((error.get("ctx") or {}).get("pattern", ""))  # type: ignore[attr-defined]
            message = PATTERN_WORDS.get(pattern, message)
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    """Translate every failure into the common error shape."""

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return _answer(exc.status, exc.code, exc.message)

    @app.exception_handler(NotFound)
    async def _not_found(_request: Request, exc: NotFound) -> JSONResponse:
        return _answer(404, "not_found", str(exc))

    @app.exception_handler(Conflict)
    async def _conflict(_request: Request, exc: Conflict) -> JSONResponse:
        return _answer(409, exc.code, str(exc))

    @app.exception_handler(Invalid)
    async def _invalid(_request: Request, exc: Invalid) -> JSONResponse:
        return _answer(422, "invalid", str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(error.get("type") == "json_invalid" for error in errors):
            return _answer(
                400,
                "malformed_json",
                "the request body is not valid JSON; send an object such as "
                '{"client_id": "…", "text": "…"} with Content-Type: application/json',
            )
        return _answer(422, "invalid_request", _describe(errors))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(
            exc.status_code, "http_error"
        )
        message = str(exc.detail)
        if exc.status_code == 404:
            message = "no such route; see /openapi.json for the API"
        return _answer(exc.status_code, code, message)

    @app.exception_handler(DBAPIError)
    async def _database(_request: Request, exc: DBAPIError) -> JSONResponse:
        if not lost_connection(exc):
            raise exc  # a bug: the server error middleware answers 500 and logs it
        unavailable = database_unavailable()
        return _answer(unavailable.status, unavailable.code, unavailable.message, RETRY_SOON)
