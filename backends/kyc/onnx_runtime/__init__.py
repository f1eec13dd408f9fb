"""The ONNX runtime room: the local ``onnxruntime`` backend that serves ``model.onnx`` on
the CPU (:mod:`.backend`), its settings read from the config (:mod:`.settings`), its
sessions: onnxruntime's (:mod:`.sessions`) and OpenVINO's (:mod:`.openvino`), and the
Triton glue of the backend (``local_backends/onnxruntime/model.py``)."""
