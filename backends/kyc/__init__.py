"""KYC models for NVIDIA Triton Inference Server: runtime, repository tools, model logic."""

__version__ = "0.1.0"
