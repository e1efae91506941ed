"""What bench/ and tests/ share, so that neither imports the other: the served-process launcher and the load
generator run from outside (served, loadgen), the SparkTide callback body (calls), the engine proxy and its TLS front
(proxy, tls_front), the rerank server in both API shapes (rerank_server), the proxy that adds a bearer token for
the MCP conformance suite (bearer_proxy), and the local OAuth issuer that signs MCP access tokens (issuer).

Its rule: it imports es_provider and third-party packages only, never bench or tests
(tests/unit/test_bench_imports.py keeps bench and tests apart)."""
