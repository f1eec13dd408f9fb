"""``kyc web``: the capture page in front of the pipeline (camera, challenge, document,
decision), an ASGI app on uvicorn that talks to Triton over gRPC."""
