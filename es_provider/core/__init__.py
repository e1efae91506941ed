"""The rules and models the rest is built from: who may read what (acl), what a score means (calibration), Dify's
metadata conditions, errors, deadlines, index names, strict JSON, markup residue and the retry policy of raced
writes, all pure; and the log format (logs) and the metrics (metrics). Imports nothing else of es_provider; no
module here but logs (which quiets aiohttp's server log) imports an I/O library."""
