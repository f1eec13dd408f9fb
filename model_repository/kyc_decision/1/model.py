"""kyc_decision: glue only; the logic is the installed, unit-tested kyc.decision package."""

from kyc.decision.model import DecisionModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
