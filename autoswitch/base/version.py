"""The autoswitch version (``autoswitch.__version__``; pyproject.toml carries the same string)."""

VERSION = "0.1.0"
