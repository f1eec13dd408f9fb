"""face_preprocess: glue only; the logic is the installed, unit-tested kyc.face package."""

from kyc.face.model import TritonPythonModel

__all__ = ["TritonPythonModel"]
