"""es_provider: permission-safe OpenSearch retrieval for agent platforms."""

__version__ = "0.1.0"
