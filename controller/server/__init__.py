"""The controller process around the state machine: the node and its proposer, the gRPC service and
streams, authorization and the audit trail, metrics, status page and alerts, the event log, membership
changes, the process entry and its start-up checks."""
