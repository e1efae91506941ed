"""The access record: what a record holds and how it is written (access, pure but for the request it notes on) and
where it goes: the sinks (sinks), the index sink's durable spool (spool; its signed lines, lines; the host's key,
spool_key; its write-ahead journal, journal), one sink's queue and writer (channel) and the recorder over them
(recorder). Imports core, config, engine and search's neutral models."""
