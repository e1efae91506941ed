"""The rules and values everything stands on. Imports no other package of es_provider; its pure modules (the `pure`
contract in pyproject.toml) import no I/O library either. Its modules, one line each: docs/development.md, "Layout"."""
