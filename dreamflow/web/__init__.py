"""The dashboard: what agents remember, in the browser, at `/ui` on the service (docs/dashboard.md).

`mount` adds it to the API app as a sub-application: server-rendered pages (Jinja2 templates in `templates/`),
one small hand-written script and a style sheet in `static/`, nothing loaded from elsewhere. Modules:
`app` (visitor, rendering, errors, URLs), `sessions` (sign-in and CSRF tokens), `pages` (the pages that read),
`changes` (the forms that change), `markdown_html` (a file's Markdown as safe HTML), `graph_layout` (the graph
page's drawing).
"""

from __future__ import annotations


def mount(app, catalog, service, tokens) -> None:
    """Serve the dashboard at `/ui` on `app` (a FastAPI app) over `catalog` (the service's workspaces, or one
    memory), with the service's jobs when `service` is given; `tokens` (`engine.config.grants.Tokens`) as the API checks
    them."""
    from fastapi import FastAPI
    from fastapi.staticfiles import StaticFiles

    from dreamflow.http.access import DASHBOARD
    from dreamflow.web.app import Dashboard, add_error_pages
    from dreamflow.web.changes import router as changing
    from dreamflow.web.pages import router as reading
    from dreamflow.web.sessions import Sessions

    ui = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    ui.state.dashboard = Dashboard(catalog, service, Sessions(tokens))
    ui.mount("/static", StaticFiles(packages=[("dreamflow.web", "static")]), name="static")
    ui.include_router(reading)
    ui.include_router(changing)
    add_error_pages(ui)
    app.mount(DASHBOARD, ui)
