"""The application's typed state: what create_app puts in the app, and what its endpoints and middleware read.
(SERVICES is edge/service.py's, RECORDER audit/recorder.py's, the page keys workbench.py's and access_view.py's.)"""

from __future__ import annotations

from aiohttp import web

from es_provider.core.metrics import Metrics
from es_provider.edge.own_indices import IndexMaker
from es_provider.engine.client import Engine

ENGINE = web.AppKey("engine", Engine)
METRICS = web.AppKey("metrics", Metrics)
OPENAPI = web.AppKey("openapi", bytes)
METRICS_TOKEN = web.AppKey("metrics_token", bytes)
# The own indices' makers: the engine's, and the access cluster's.
INDEX_MAKERS = web.AppKey("index_makers", list[IndexMaker])
