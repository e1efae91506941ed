"""The access record: what one request was and where its record goes. Imports only core, config, engine and
search.domain of es_provider. Its modules, one line each: docs/development.md, "Layout"."""
