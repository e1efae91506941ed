"""Everything that writes chunks: files and sources read, chunked, embedded and bulk-written (records, sources,
readers, chunker, writer), `--sync`'s removals (sync) and the knowledge bases' index administration (admin). Imports
core, config, engine and search; never a protocol or the web layer."""
