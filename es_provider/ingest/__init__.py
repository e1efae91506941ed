"""Everything that writes chunks: files and sources read, chunked, embedded and bulk-written (records, sources,
readers, chunker, writer), whose document ids are whose (ownership), `--sync`'s removals (sync), one `ingest` run
from paths to summary (run) and the knowledge bases' index administration (admin). Imports core, config, engine
and search; never a protocol or the web layer."""
