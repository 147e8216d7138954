"""The shared base every layer may import: typed errors, structured logging, durable-file helpers,
limits and retry back-off. It imports nothing else from autoswitch."""
