"""Bearer-token authentication for every route but health."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from nightowl.api.errors import ApiError
from nightowl.store.database import Database
from nightowl.store.users import UserInfo, user_for_token

_bearer = HTTPBearer(auto_error=False)


def database_of(request: Request) -> Database:
    """The app store the application was built with."""
    database: Database = request.app.state.database
    return database


def missing_token() -> ApiError:
    """The 401 for a request that carries no token."""
    return ApiError(
        401,
        "missing_token",
        "send an access token as 'Authorization: Bearer <token>'; "
        "`nightowl token create` makes one",
    )


def invalid_token() -> ApiError:
    """The 401 for a token that is unknown or revoked."""
    return ApiError(
        401,
        "invalid_token",
        "this access token is unknown or revoked; `nightowl token create` makes a new one",
    )


def current_user(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> UserInfo:
    """The user whose token authorised this request, or a 401 saying what to send."""
    checked: UserInfo | None = getattr(request.state, "user", None)  # by the edge (api/edge.py)
    if checked is not None:
        return checked
    token = credentials.credentials if credentials else request.query_params.get("access_token")
    if not token:
        raise missing_token()
    with database_of(request).read() as session:
        user = user_for_token(session, token)
    if user is None:
        raise invalid_token()
    return user


CurrentUser = Annotated[UserInfo, Depends(current_user)]
