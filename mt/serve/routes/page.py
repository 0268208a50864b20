"""The web page at GET / (mt/serve/static/index.html: one file, no framework, nothing fetched
from elsewhere; it speaks the /v1 API). Not in the OpenAPI schema."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response

from mt.serve.deps import StateDep

STATIC = Path(__file__).resolve().parents[1] / "static"  # index.html, shipped as package data

router = APIRouter()


def read_page() -> bytes:
    """The page's bytes (read once, by `create_app`: a missing file fails at start-up, not per request)."""
    return (STATIC / "index.html").read_bytes()


@router.get("/", summary="The translation web page", include_in_schema=False)
async def index(state: StateDep) -> Response:
    return Response(state.page, media_type="text/html; charset=utf-8",
                    headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})
