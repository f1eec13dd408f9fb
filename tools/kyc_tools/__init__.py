"""KYC tooling: the ``kyc`` command, the client SDK, benchmarks, evaluation, repository
tools, the capture page and the renderers of test data. Nothing here serves: the Triton
models run the :mod:`kyc` package alone, which imports nothing of this one."""
