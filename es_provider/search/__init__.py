"""A search from the neutral request to ranked, re-checked chunks. Imports only core, config and engine of es_provider.
Its modules, one line each: docs/development.md, "Layout"."""
