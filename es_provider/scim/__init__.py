"""SCIM 2.0 into the principal store: the protocol service (service), its bounds (bounds) and PATCH normalisation
(patch), the storage behind scim2-server (storage) and `principals import` from a file (principals_import).
Imports edge and below; never a platform protocol or the web layer."""
