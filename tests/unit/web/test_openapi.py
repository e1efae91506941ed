"""web/openapi.py: the OpenAPI document built from the protocol table — every route a platform calls, its body's
model, its answer and its protocol's error body for each refusal; the operations routes; nothing hidden shown."""

from __future__ import annotations

import pytest

from es_provider.web import openapi
from es_provider.web.app import PROTOCOLS

DOCUMENT = openapi.document(PROTOCOLS)


@pytest.mark.parametrize(("path", "method", "model", "error"), [
    ("/agent/knowledge/{knowledge_id}/{version}", "post", "CallbackRequest", "sparktideError"),
    ("/knowledge-bases", "get", None, "agentartsError"),
    ("/knowledge-bases/retrieve", "post", "RetrieveRequest", "agentartsError"),
    ("/retrieval", "post", "RetrievalRequest", "difyError"),
])
def test_each_platform_route_names_its_body_and_its_error_body(path: str, method: str, model: str | None,
                                                               error: str) -> None:
    operation = DOCUMENT["paths"][path][method]
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    assert body == ({"$ref": f"#/components/schemas/{model}"} if model else None)
    assert operation["security"] == [{"bearer": []}]
    refusals = {status for status in operation["responses"] if status != "200"}
    assert refusals == {str(s) for s in (400, 401, 403, 404, 405, 408, 413, 415, 422, 429, 503, 504)}
    assert {r["content"]["application/json"]["schema"]["$ref"] for s, r in operation["responses"].items()
            if s != "200"} == {f"#/components/schemas/{error}"}
    assert error in DOCUMENT["components"]["schemas"]
    if model is not None:
        assert model in DOCUMENT["components"]["schemas"]


@pytest.mark.parametrize(("path", "shown"), [
    ("/healthz", True), ("/readyz", True), ("/metrics", True), ("/openapi.json", True),
    ("//retrieval", False),  # a trailing-slash registration's alias: served, not described
    ("/{prefix}/retrieval", False),  # the misregistered endpoint's 404
])
def test_the_operations_routes_are_described_and_the_hidden_ones_are_not(path: str, shown: bool) -> None:
    assert (path in DOCUMENT["paths"]) is shown


def test_an_aiohttp_pattern_becomes_an_openapi_parameter() -> None:
    assert openapi._path("/x/{name:.+}/y/{id}") == "/x/{name}/y/{id}"
    assert DOCUMENT["openapi"] == "3.0.3" and DOCUMENT["info"]["description"].endswith("sparktide, agentarts, dify.")
