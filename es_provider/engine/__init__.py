"""OpenSearch and Elasticsearch, reached through one Engine. Imports only core and config of es_provider. Its modules,
one line each: docs/development.md, "Layout"."""
