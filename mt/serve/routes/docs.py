"""GET /docs (Swagger UI) and GET /redoc, from files installed with the server, never a CDN: an
air-gapped host or a browser without internet shows the API reference as well as any other.

The scripts, stylesheet and icon are those the `fastapi-offline` package ships (Swagger UI and
ReDoc bundles); `create_app` mounts them at `ASSETS` and these routes point FastAPI's own page
builders at them.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse

ASSETS = "/docs-assets"  # where create_app mounts `assets_folder()`

router = APIRouter()


def assets_folder() -> Path:
    """The installed Swagger UI / ReDoc bundles (swagger-ui-bundle.js, swagger-ui.css,
    redoc.standalone.js)."""
    return Path(str(files("fastapi_offline") / "static"))


def _urls(request: Request) -> tuple[str, str]:
    """(the app's OpenAPI document, its offline assets) under the root path a proxy serves it at."""
    root = request.scope.get("root_path", "")
    return f"{root}{request.app.openapi_url}", f"{root}{ASSETS}"


@router.get("/docs", include_in_schema=False)
async def swagger_ui(request: Request) -> HTMLResponse:
    openapi, assets = _urls(request)
    return get_swagger_ui_html(openapi_url=openapi, title=f"{request.app.title} - API",
                               swagger_js_url=f"{assets}/swagger-ui-bundle.js",
                               swagger_css_url=f"{assets}/swagger-ui.css",
                               swagger_favicon_url=f"{assets}/favicon.png")


@router.get("/redoc", include_in_schema=False)
async def redoc(request: Request) -> HTMLResponse:
    openapi, assets = _urls(request)
    return get_redoc_html(openapi_url=openapi, title=f"{request.app.title} - ReDoc",
                          redoc_js_url=f"{assets}/redoc.standalone.js",
                          redoc_favicon_url=f"{assets}/favicon.png", with_google_fonts=False)
