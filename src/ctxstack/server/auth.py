"""Who is calling: bearer API tokens, or the single local user under ``--no-auth``.

Tokens are created by ``ctxstack user create NAME`` and stored only as their SHA-256
(:mod:`ctxstack.store.users`). Every route that touches user data depends on
:func:`current_user`; ownership checks then happen in the store functions, which answer
"not found" for another user's rows so a caller cannot even learn they exist.

``--no-auth`` is meant for a server only this machine can reach: ``ctxstack serve`` makes
it the default only when bound to a loopback address, and every request then acts as the
one local user (created on start).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ctxstack.server.identity import CurrentUser
from ctxstack.server.state import service_state
from ctxstack.store.users import user_by_token

_bearer = HTTPBearer(
    auto_error=False,
    description="An API token from `ctxstack user create NAME` (not needed under --no-auth).",
)

_MISSING = (
    "missing API token: send 'Authorization: Bearer <token>' "
    "(create one on the server with: ctxstack user create NAME)"
)


async def current_user(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> CurrentUser:
    """The authenticated caller; 401 with a message saying how to authenticate otherwise."""
    state = service_state(request)
    if state.settings.auth == "none":
        return state.local_user
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise HTTPException(401, _MISSING, headers={"WWW-Authenticate": "Bearer"})
    user = await user_by_token(state.factory, credentials.credentials.strip())
    if user is None:
        raise HTTPException(
            401, "unknown API token: check the token, or create one with: ctxstack user create "
            "NAME", headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    return CurrentUser(id=user.id, name=user.name, is_admin=state.settings.is_admin(user.name))


UserDep = Annotated[CurrentUser, Depends(current_user)]


async def admin_user(user: UserDep) -> CurrentUser:
    """The caller, if an admin (else 403): every /api/admin route depends on it."""
    if not user.is_admin:
        raise HTTPException(
            403, "only an admin may read or change model configs (list admins in "
            "CTXSTACK_ADMIN_USERS)"
        )
    return user


AdminDep = Annotated[CurrentUser, Depends(admin_user)]
