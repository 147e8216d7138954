"""Store backends: the controller's replicated log kept in an external store (SQL today) instead
of our own Raft. One leader at a time holds a lock row in the store (SOFARegistry's
``distribute_lock``); every write re-checks that lock inside the same transaction, so a deposed
leader's writes fail; every node tails the log and applies it to the same state machine."""
