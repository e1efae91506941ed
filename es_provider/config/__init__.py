"""The settings file's models and checks (settings), the secrets named in it (secrets), and the generated
configuration reference (reference). Imports only es_provider.core."""
