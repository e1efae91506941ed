"""SCIM 2.0 into the principal store. Imports only core, config, engine, identity and edge of es_provider. Its modules,
one line each: docs/development.md, "Layout"."""
