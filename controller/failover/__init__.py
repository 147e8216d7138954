"""Failure detection and elections: the brokers' heartbeats (liveness.py, the liveness desk), the
majority opinion of the controllers (peers.py), the leader's dead-master scan and the preferred-master
rebalance (election_scanner.py, rebalance.py)."""
