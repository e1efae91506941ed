"""What every HTTP handler passes before and after its protocol's rules: platform credentials and signatures (auth),
admission (body deadline, slots, fair turns), the idempotency window, signed callbacks' first uses (replays), the
services a handler is given (service) and the handlers' shared steps and Protocol/Route rows (kit). Imports the
layers below (core, config, engine, search, identity, audit); never a protocol, SCIM or the web layer."""
