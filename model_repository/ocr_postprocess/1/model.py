"""ocr_postprocess: glue only; the logic is the installed, unit-tested kyc.document package."""

from kyc.document.model import OcrPostprocessModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
