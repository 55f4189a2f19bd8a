"""One error shape for every route: `{"error": {"code", "message"}}`, saying what to do."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from nightowl.store.errors import Conflict, Invalid, NotFound


class ApiError(Exception):
    """An error answered to the client as is."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _answer(status: int, code: str, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def _describe(errors: list[dict[str, object]]) -> str:
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"  # type: ignore[attr-defined]
        parts.append(f"{where}: {error.get('msg')}")
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
        return _answer(409, "conflict", str(exc))

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
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        message = str(exc.detail)
        if exc.status_code == 404:
            message = "no such route; see /openapi.json for the API"
        return _answer(exc.status_code, code, message)
