"""The served application. Imports every package of es_provider but cli and offline. Its modules, one line each:
docs/development.md, "Layout"."""
