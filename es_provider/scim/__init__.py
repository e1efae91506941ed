"""SCIM 2.0 into the principal store: the protocol service (service) and the thread it handles requests on (worker),
its bounds (bounds) and PATCH normalisation (patch), the storage behind scim2-server (storage) with its unique-value
claims (claims) and search narrowing (narrowing), and `principals import` from a file (principals_import).
Imports edge and below; never a platform protocol or the web layer."""
