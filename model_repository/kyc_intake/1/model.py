"""kyc_intake: glue only; the logic is the installed, unit-tested kyc.intake package."""

from kyc.intake.model import TritonPythonModel

__all__ = ["TritonPythonModel"]
