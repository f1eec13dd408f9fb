"""Exceptions raised by kyc_export; every message names the model or archive concerned."""

from __future__ import annotations


class KycExportError(Exception):
    """Base class: the CLI turns any of these into one line and exit status 1."""


class ManifestError(KycExportError):
    """The packaged manifest.json is missing an entry or is malformed."""


class FetchError(KycExportError):
    """pip could not download an archive, or a member is missing from it."""


class ChecksumError(FetchError):
    """An archive or member does not have the pinned sha256."""


class ConversionError(KycExportError):
    """A source model does not have the structure its converter expects."""


class ValidationError(KycExportError):
    """A converted model disagrees with its Triton config.pbtxt."""


class ParityError(ValidationError):
    """A converted model's outputs differ from the original model's."""


class InstallError(KycExportError):
    """Writing a model into the repository failed."""
