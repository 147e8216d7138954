"""autoswitch: controller-mode replica manager for log brokers.

Subpackages map to the repository's root folders:
``autoswitch.controller`` (controller/), ``autoswitch.broker`` (broker/),
``autoswitch.ha`` (ha/), ``autoswitch.epochfile`` (epochfile/),
``autoswitch.pipeline`` (pipeline/).
"""

__version__ = "0.1.0"
