"""The settings file's models and checks: the whole file and its reading (settings), what every section shares
(model), and the sections by concern — the engine connection, the service and its callers' credentials (serving);
the knowledge bases and how they are searched (knowledge); the principal store and SCIM (identity); the access
record (audit). Also the secrets named in the file (secrets) and the generated configuration reference
(reference). Imports only es_provider.core."""
