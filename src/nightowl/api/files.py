"""`GET .../messages/{id}/files/{n}`: download a file the agent attached to a message."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import FileResponse

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.inputs import PathId
from nightowl.store.blobs import file_path
from nightowl.store.conversations import get_conversation
from nightowl.store.errors import NotFound
from nightowl.store.questions import get_message

routes = APIRouter(prefix="/v1/conversations", tags=["files"])

# Shown in the page; anything else (SVG and HTML included) is only ever downloaded.
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


@routes.get("/{conversation_id}/messages/{message_id}/files/{index}")
def download(
    conversation_id: PathId,
    message_id: PathId,
    index: Annotated[int, Path(ge=0, le=10_000, description="Which file, from 0.")],
    user: CurrentUser,
    request: Request,
) -> FileResponse:
    """The file's bytes; never rendered as a page of this site, whatever it contains."""
    with database_of(request).read() as session:
        get_conversation(session, conversation_id, user.id)
        message = get_message(session, conversation_id, message_id)
    files = message.meta.get("files") or []
    if not 0 <= index < len(files):
        raise NotFound(
            f"message {message_id} has {len(files)} file(s); ask for 0 to {len(files) - 1}"
        )
    attached = files[index]
    path = file_path(request.app.state.settings.blob_dir, attached["blob"])
    content_type = str(attached["content_type"])
    inline = content_type in INLINE_TYPES
    return FileResponse(
        path,
        media_type=content_type if inline else "application/octet-stream",
        filename=str(attached["name"]),
        content_disposition_type="inline" if inline else "attachment",
        headers={
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'; sandbox",
            "Cache-Control": "private, max-age=86400",
        },
    )
