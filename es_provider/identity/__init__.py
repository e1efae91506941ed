"""Who a user is: the principal store and a subject's groups. Imports only core, config and engine of es_provider. Its
modules, one line each: docs/development.md, "Layout"."""
