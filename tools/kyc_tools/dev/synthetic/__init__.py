"""Renderers of test data: documents (:mod:`.document`) and liveness frames
(:mod:`.liveness`), made by software for tests, benchmarks and evaluation."""
