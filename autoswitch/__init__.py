"""autoswitch: controller-mode replica manager for log brokers.

Subpackages map to the repository's root folders:
``autoswitch.controller`` (controller/), ``autoswitch.broker`` (broker/),
``autoswitch.ha`` (ha/), ``autoswitch.epochfile`` (epochfile/),
``autoswitch.pipeline`` (pipeline/, an optional extra).
Inside the package itself, ``autoswitch.base`` is the shared base (errors, logging, file helpers)
and ``autoswitch.app`` the application layer (CLI, playground, status).
"""

from autoswitch.base.version import VERSION as __version__

__all__ = ["__version__"]
