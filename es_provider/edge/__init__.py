"""What every handler passes before and after its protocol's rules. Imports only core, config, engine, search, identity
and audit of es_provider. Its modules, one line each: docs/development.md, "Layout"."""
