"""liveness_sequence: glue only; the logic is the installed, unit-tested kyc.liveness package."""

from kyc.liveness.model import LivenessModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
