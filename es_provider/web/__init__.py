"""The served application: create_app and the protocol table (app), its typed state (state), middleware, probes
(health) and start checks (startup), the OpenAPI document (openapi), the operators' workbench and the access view
with their pages (static/). Imports everything below it; only the command line imports it."""
