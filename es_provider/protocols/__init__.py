"""The platforms' protocols, each a pure reading of its specification over edge's handlers: a body becomes a neutral
search request, a neutral result becomes the platform's answer. Imports only core, config, search, audit, edge and
identity of es_provider
(identity for MCP's user tokens). Its modules, one line each: docs/development.md, "Layout"."""
