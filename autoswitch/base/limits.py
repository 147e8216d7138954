"""Limits every part agrees on. A value a peer sends is checked against these at the edge (gRPC
service, name server, state machine, broker), so what one part accepts the next never refuses.
Part-specific limits (frame sizes, queue depths, batch counts) stay with their part and are
documented config keys; this module holds only the ones shared across parts."""

from __future__ import annotations

# Names: clusterName, brokerName (group), controller config keys. RocketMQ caps topic names at
# 127 characters; group and cluster names get the same bound everywhere.
MAX_NAME_LEN = 127
# "host:port" addresses (broker, HA, controller).
MAX_ADDRESS_LEN = 255
# brokerIds per group: registered replicas, SyncStateSet, eligible and alive lists. A group has a
# handful of replicas; 64 leaves room without letting a request carry thousands.
MAX_REPLICAS_PER_GROUP = 64
# brokerIds are >= 1 and at most this: "next id" (max + 1) still fits a signed 64-bit field.
MAX_BROKER_ID = 1 << 62
# Offsets, MasterEpochs and syncStateSetEpochs travel in signed 64-bit protobuf fields.
MAX_INT64 = (1 << 63) - 1
# Message topic and msg_id, in UTF-8 bytes (the record header stores their lengths in one byte).
MAX_TOPIC_BYTES = 255
MAX_MSG_ID_BYTES = 128
# Controller members (voters + learners): Raft clusters beyond 7 voters only get slower. Brokers
# refuse a longer controller list from a heartbeat reply.
MAX_CONTROLLERS = 9

# Name servers a broker registers with and a client asks (RocketMQ's namesrvAddr list): one per
# machine or zone is the use; more only multiplies every broker's registrations.
MAX_NAMESRVS = 8

# A broker process's incarnation (registration, heartbeats, the file beside its log).
MAX_INCARNATION_LEN = 64
# A health figure a heartbeat may carry (append/fsync time, loop lag), in ms: one hour.
MAX_HEALTH_MS = 3_600_000.0
MAX_TOPIC_RATES = 16              # a heartbeat's busiest topics (broker/traffic.py)
MAX_RATE_PER_S = 1e9              # a stated produce or consume rate, messages per second
MAX_VERSION_LEN = 64                  # a release string ("0.1.0") as members report it

# Zones a group's preference may list, and the most a group may require its acks to span
# (min_in_sync_zones): failure domains of one group, not of a fleet.
MAX_ZONES = 16

# Decisions (elections, SyncStateSet changes) each controller keeps in memory for `admin explain`
# and the status page: so many per group, for so many groups (the most recent ones).
DECISIONS_KEPT_PER_GROUP = 16
DECISION_GROUPS_KEPT = 4096

# Handovers in a row that one held write waits behind before it is refused (OVERLOADED).
MAX_GATE_WAITS = 64

# SyncStateSet proposals whose outcome a master does not know (each is kept, and counted for acks,
# until the controller's syncStateSetEpoch passes its base). At this many the master proposes
# nothing new, only its known set again (a confirm: accepted, it resolves them all; failed, it is
# one more entry). Replicas that flap during a controller outage would otherwise add a set per
# distinct membership.
MAX_UNRESOLVED_PROPOSALS = 16

# Produce requests one broker holds at once while it waits for its own switch to master
# (broker master_switch_hold_ms); past it a redirected request is answered at once.
MAX_SWITCH_HOLDS = 1024
