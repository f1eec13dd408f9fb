"""The one shape of every Python model: a *step*, and the adapter that serves it (the
in-process runtime, which runs the ONNX models too, is :mod:`kyc.local`, above this
room and :mod:`kyc.onnx_runtime`).

- :mod:`kyc.pipeline.step`: what a step is (built from a :class:`StepContext`, run
  on a list of requests' input arrays, one answer or one error per request), the
  errors that choose a request's status, and :class:`Callee`, the way a step calls
  another model (a detector, a recogniser, an embedding, the antifraud scorer).
- :mod:`kyc.pipeline.triton`: the one adapter that turns a step into a Triton
  ``TritonPythonModel`` (gather, run, scatter, per-request errors, BLS callees).
- :mod:`kyc.pipeline.modelconfig`: other models' configs read with Triton's protobuf
  schema, without loading the gRPC client into a serving stub.

Serving code: imports nothing from the tooling (bench, repo tooling, CLI, ops).
"""
