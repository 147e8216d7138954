"""autoswitch.ha.io: the asyncio adapters of AutoSwitchHA. ``HAMaster`` (master.py) and its per-slave
connection (master_conn.py), ``HASlave`` (slave.py): sockets, tasks, timers and the store's
blocking calls around the sans-IO cores of ``autoswitch.ha`` (codec, sessions, SyncStateSet
tracker, digests), which import neither asyncio nor a socket (tests/unit/test_import_rules.py)."""
