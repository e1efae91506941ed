"""The settings file, read and checked once. Imports only core of es_provider. Its modules, one line each:
docs/development.md, "Layout"."""
