"""The one door to OpenSearch and Elasticsearch: the client and its single error boundary (client), what differs
between the two engines (dialect), the searches' keep-alive HTTP/1.1 connections (http1) and the one "worth a
retry?" rule (transient). Imports only es_provider.core; nothing else of es_provider opens a connection to the
engine."""
