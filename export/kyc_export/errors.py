"""Exceptions raised by kyc_export; every message names the model concerned.

Fetching raises :mod:`kyc_tools.assets.errors` (a bad manifest entry, a failed download, a
wrong sha256); ``kyc models`` reports those the same way.
"""

from __future__ import annotations


class KycExportError(Exception):
    """Base class: the CLI turns any of these into one line and exit status 1."""


class ConversionError(KycExportError):
    """A source model does not have the structure its converter expects."""


class ValidationError(KycExportError):
    """A converted model disagrees with its Triton config.pbtxt."""


class ParityError(ValidationError):
    """A converted model's outputs differ from the original model's."""


class InstallError(KycExportError):
    """Writing a model into the repository failed."""
