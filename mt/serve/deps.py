"""FastAPI dependencies of the routes (as `api/deps.py` in FastAPI's full-stack template): the
server's state, the ready models (`Fleet`: routing and the language detector), the request's
fields, the API-key check and the admin-key check.

Each is an `Annotated` type a route names as a parameter (`fleet: ReadyFleet`), or, for the key
checks, a route's `dependencies=[RequireKey]`. FastAPI solves them in order and once per request:
a translate route reads its body first (413/408/400), then checks its key (403), then needs the
models (503 while they load), as `RequireKey` depends on `Fields` and runs before the parameters.
All are `async`: none blocks, and FastAPI runs a plain `def` dependency in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.requests import ClientDisconnect

from mt.serve.fleet import Fleet
from mt.serve.limits import DAY, MINUTE, Limited, client_address, client_key
from mt.serve.requests import ApiError, check_chars, check_key, check_request, form_fields, parse_fields
from mt.serve.settings import ServeSettings
from mt.serve.state import ServeState


async def serve_state(request: Request) -> ServeState:
    """The state `create_app` put on `app.state.serve`."""
    return request.app.state.serve


StateDep = Annotated[ServeState, Depends(serve_state)]


async def serve_settings(state: StateDep) -> ServeSettings:
    return state.settings


SettingsDep = Annotated[ServeSettings, Depends(serve_settings)]


async def ready_fleet(state: StateDep) -> AsyncIterator[Fleet]:
    """The served models, or 503 (with Retry-After) while they load or when they failed to. The
    request holds this fleet until it is answered: a reload swaps in a new one meanwhile, and closes
    this one only once its requests are done (`Fleet.users`)."""
    fleet = state.fleet
    if fleet is None:
        raise ApiError(503, state.not_ready() or "model is loading", {"Retry-After": "1"})
    fleet.users += 1
    try:
        yield fleet
    finally:
        fleet.users -= 1


ReadyFleet = Annotated[Fleet, Depends(ready_fleet)]


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The request's body, at most `limit` bytes (413) and within `timeout_s` (408); a client that
    closes its connection before the body has all come is a 499 (one access-log line, no traceback)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"body: {declared} bytes, the limit is {limit}")

    async def body() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"body: over {limit} bytes, the limit")
            chunks.append(chunk)
        return b"".join(chunks)

    try:  # a client trickling its body would otherwise hold its connection for ever
        return await asyncio.wait_for(body(), timeout_s)
    except asyncio.TimeoutError:
        raise ApiError(408, f"body: not received within {timeout_s:g} s (--timeout)") from None
    except ClientDisconnect:  # the client went away before its whole body came: its doing, not an error here
        raise ApiError(499, "client closed the request before its body arrived") from None


async def request_fields(request: Request, settings: SettingsDep) -> dict[str, Any]:
    """The body's fields (JSON, urlencoded or multipart form data), read with the byte limit (413)
    and within --timeout (408) before anything is parsed (`read_body`)."""
    raw = await read_body(request, settings.max_body_bytes, settings.timeout_s)
    content_type = request.headers.get("content-type", "")
    if content_type.lower().startswith("multipart/form-data"):
        request._body = raw  # let Starlette's parser read what we already took off the wire
        form = await request.form()
        return form_fields(form.multi_items())
    # q per segment, and the options
    return parse_fields(raw, content_type, max_fields=settings.max_segments + 16)


Fields = Annotated[dict[str, Any], Depends(request_fields)]


async def require_key(request: Request, fields: Fields, state: StateDep) -> None:
    """403 unless keys are off or the request carries one (X-API-Key header, else the api_key field);
    then the key's limits (or, without keys, the client address's): 429 with Retry-After over one.
    The key's name (never the key) is left on the request's scope for the access log and metrics."""
    texts = [text for name in ("q", "segments") for text in _texts(fields.get(name))]
    check_request(texts, state.settings)  # refused anyway: now, before it costs the client's buckets
    typed = fields.get("prefix")  # /v1/complete's typed target text counts towards the characters too
    if isinstance(typed, str):
        texts.append(typed)
        check_chars(texts, state.settings)
    admit(request, state, fields.get("api_key"), sum(len(text) for text in texts))


def admit(request: Request, state: ServeState, given: Any, chars: int) -> None:
    """`require_key`'s check for a request of `chars` characters whose api_key field is `given`
    (POST /translate_file reads its own body, so it calls this itself)."""
    settings = state.settings
    header = request.headers.get("x-api-key")
    key = check_key(header if header else (given if isinstance(given, str) else None), settings)
    if key is not None:
        request.scope["mt.key"] = key.name
        who, per_minute, per_day = f"key {key.name}", key.requests_per_minute, key.characters_per_day
    else:
        peer = request.client.host if request.client else None
        address = client_address(peer, request.headers.get("x-forwarded-for"), settings.trusted_proxies)
        who = f"address {client_key(address)}"  # an IPv6 client by its /64
        per_minute, per_day = settings.address_requests_per_minute, settings.address_characters_per_day
    try:
        state.limiter.take(who, [("requests_per_minute", per_minute, MINUTE, 1),
                                 ("characters_per_day", per_day, DAY, chars)])
    except Limited as e:
        raise ApiError(429, e.message, {"Retry-After": str(int(e.retry_after))}) from None


async def require_admin(request: Request, state: StateDep) -> None:
    """403 unless the request's X-API-Key header is a key marked `admin: true` in the keys file
    (a server without keys has no admin routes: anyone could call them)."""
    if not state.settings.keys_required:
        raise ApiError(403, "admin routes need an --api-keys file with a key marked admin: true")
    key = check_key(request.headers.get("x-api-key"), state.settings)
    assert key is not None
    if not key.admin:
        raise ApiError(403, f"api_key: key {key.name} is not an admin key")
    request.scope["mt.key"] = key.name


RequireAdmin = Depends(require_admin)


def _texts(value: Any) -> list[str]:
    """The strings of a `q` or `segments` field (what the characters-per-day limits count)."""
    if isinstance(value, str):
        return [value]
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


RequireKey = Depends(require_key)
