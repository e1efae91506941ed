"""A search from request to ranked, re-checked chunks: the neutral request and result (domain), the one bool query
(query), hits into chunks (hits), the retriever (retrieval), embedders, the rerank stage, "why not?" (explain) and
fitting the score calibration (calibrate). Imports core, config and engine; never a protocol or the web layer."""
