"""The autoswitch version, in one place: ``autoswitch.__version__`` re-exports it and the package
metadata reads it (pyproject.toml ``[tool.setuptools.dynamic]``). Between releases main carries
the next version with ``.devN``; the releases and their commits: docs/releases.toml."""

VERSION = "0.2.0.dev0"
