"""Errors the store raises; the API and CLI turn them into messages for people."""


class StoreError(Exception):
    """Base of the store's errors."""


class NotFound(StoreError):
    """The thing asked for does not exist (or belongs to someone else)."""


class Invalid(StoreError):
    """The request would break a rule of the store (e.g. a duplicate name)."""


class Conflict(StoreError):
    """The request is valid but the thing is no longer in a state that allows it. `code` names
    the kind for clients (the API's error code)."""

    def __init__(self, message: str, code: str = "conflict") -> None:
        super().__init__(message)
        self.code = code
