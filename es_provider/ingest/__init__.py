"""Everything that writes chunks. Imports only core, config, engine and search of es_provider. Its modules, one line
each: docs/development.md, "Layout"."""
