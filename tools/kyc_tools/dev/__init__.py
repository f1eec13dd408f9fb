"""For the project's developers and ML engineers: measuring and testing, never serving.
:mod:`~kyc_tools.dev.bench` (``kyc bench``, ``kyc tune``: speed), :mod:`~kyc_tools.dev.eval`
(``kyc eval``: each version's quality on labelled data) and :mod:`~kyc_tools.dev.synthetic`
(the renderers of test documents and liveness frames)."""
