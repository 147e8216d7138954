"""autoswitch.epochfile: the ``<MasterEpoch, startOffset>`` cache, the consistent-point
algorithm used by the AutoSwitchHA handshake, and its crash-safe file."""

from autoswitch.epochfile.cache import EpochCache, EpochEntry
from autoswitch.epochfile.consistent import ConsistentPoint, entries_to_record, find_consistent_point
from autoswitch.epochfile.errors import EpochFileCorrupt, EpochRuleError, NoConsistentPoint
from autoswitch.epochfile.file import EpochFile

__all__ = [
    "ConsistentPoint",
    "EpochCache",
    "EpochEntry",
    "EpochFile",
    "EpochFileCorrupt",
    "EpochRuleError",
    "NoConsistentPoint",
    "entries_to_record",
    "find_consistent_point",
]
