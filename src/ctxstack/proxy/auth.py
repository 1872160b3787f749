"""Who may use the proxy: ``ctxstack user create`` tokens, unless bound to loopback.

On a loopback address the proxy needs no token by default (only this machine can reach
it); anywhere else every request must carry a token of a user in the database, as
``Authorization: Bearer <token>`` or — when ``--forward-auth`` sends the client's own
``Authorization`` to the upstream — as ``x-ctxstack-api-key: <token>``. Lookups are cached
for a short while (by the token's hash) so a request costs no query; a token stays
accepted at most that long after its user is deleted.
"""

from __future__ import annotations

import hashlib
import time

from starlette.datastructures import Headers

from ctxstack.proxy.errors import ProxyError
from ctxstack.proxy.forwarding import PROXY_KEY_HEADER
from ctxstack.store import SessionFactory, user_by_token
from ctxstack.store.errors import StorageError

CACHE_SECONDS = 30.0
MAX_CACHED = 4096
ANONYMOUS = "local"


class TokenAuth:
    """Checks proxy tokens; :meth:`caller` returns the caller's identity (the checkpoint
    salt), or raises a 401 :class:`ProxyError`."""

    def __init__(self, factory: SessionFactory | None, *, required: bool,
                 forward_auth: bool) -> None:
        if required and factory is None:
            raise ValueError("token auth needs a database")
        self.factory = factory
        self.required = required
        self.forward_auth = forward_auth
        self._cache: dict[str, tuple[float, str | None]] = {}

    async def caller(self, headers: Headers) -> str:
        if not self.required:
            return ANONYMOUS
        token = self._token(headers)
        if not token:
            where = (f"'{PROXY_KEY_HEADER}: <token>'" if self.forward_auth
                     else "'Authorization: Bearer <token>'")
            raise ProxyError(401, f"missing proxy API token: send {where} (create one with: "
                             "ctxstack user create NAME)", type="authentication_error",
                             code="missing_api_key")
        digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > now:
            user = hit[1]
        else:
            assert self.factory is not None
            try:
                record = await user_by_token(self.factory, token)
            except StorageError as exc:
                raise ProxyError(503, "the proxy cannot check API tokens right now "
                                 "(database unavailable)", type="server_error") from exc
            user = f"user:{record.id}" if record is not None else None
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[digest] = (now + CACHE_SECONDS, user)
        if user is None:
            raise ProxyError(401, "unknown proxy API token (create one with: ctxstack user "
                             "create NAME)", type="authentication_error",
                             code="invalid_api_key")
        return user

    def _token(self, headers: Headers) -> str:
        explicit = headers.get(PROXY_KEY_HEADER, "").strip()
        if explicit or self.forward_auth:
            return explicit
        scheme, _, value = headers.get("authorization", "").partition(" ")
        return value.strip() if scheme.lower() == "bearer" else ""
