"""ocr_preprocess: glue only; the logic is the installed, unit-tested kyc.document package."""

from kyc.document.model import OcrPreprocessModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
