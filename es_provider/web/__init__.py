"""The served application: create_app and the protocol table (app), the OpenAPI document (openapi), the operators'
workbench and the access view with their pages (static/). Imports everything below it; only the command line
imports it."""
