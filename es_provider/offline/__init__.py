"""Offline tools the CLI runs (kb inspect's proposal, calibration fitting, the configuration reference); nothing
served imports them. Imports only core, config, engine and search of es_provider. Its modules, one line each:
docs/development.md, "Layout"."""
