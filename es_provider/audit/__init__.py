"""The access record: what a record holds and how it is written (access, pure but for the request it notes on) and
its queues, spool and sinks (recorder). Imports core, config, engine and search's neutral models."""
