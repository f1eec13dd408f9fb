"""ocr_fields: glue only (docs/architecture.md)."""

from kyc.pipeline.triton import triton_model

TritonPythonModel = triton_model("kyc.document.step:OcrPostprocessStep")
