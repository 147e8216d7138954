"""Store backends: the controller's replicated log kept in an external store (a SQL database or
etcd) instead of our own Raft. One leader at a time holds the store's lock (SOFARegistry's
``distribute_lock`` row, or an etcd leader key on a lease); every write re-checks that lock inside
the same transaction, so a deposed leader's writes fail; every node tails the log and applies it
to the same state machine. ``base.Store`` is what a store provides."""
