"""The server's routes, one `APIRouter` per API (as `api/routes/` in FastAPI's full-stack template):
`libretranslate` (/translate, /languages), `v1` (mt's own /v1/...), `ops` (/health, /ready,
/metrics) and `page` (the web page at /). `mt.serve.app.create_app` includes them."""
