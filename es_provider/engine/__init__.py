"""The one door to OpenSearch and Elasticsearch: the Engine (client), composed of its operations by concern (indices,
documents, bulk, by_query, reads) on one base (base) that runs every call inside its budget; the single error boundary
that makes every engine failure a KnowledgeError (errors); how the requests travel (transport, over the searches'
keep-alive HTTP/1.1 connections in http1); waiting out a reindex's write block (write_block); what differs between
the two engines (dialect) and the one "worth a retry?" rule (transient). Imports only es_provider.core; nothing else
of es_provider opens a connection to the engine."""
