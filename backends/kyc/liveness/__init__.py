"""Liveness: the active head-turn challenge over Triton sequence batching, and its token."""
