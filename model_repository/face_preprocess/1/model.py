"""face_preprocess: glue only (docs/architecture.md)."""

from kyc.pipeline.triton import triton_model

TritonPythonModel = triton_model("kyc.face.step:FacePreprocessStep")
