"""The ``kyc`` command and what it runs, a room per audience: :mod:`~kyc_tools.operator`
(``kyc serve``, for whoever runs the server) and :mod:`~kyc_tools.ops` (the same at
scale), :mod:`~kyc_tools.repo` (for ML engineers shipping versions), :mod:`~kyc_tools.dev`
(bench, evaluation, test data: for developers), :mod:`~kyc_tools.web` (the capture page).
The client SDK is a distribution of its own, :mod:`kyc_client`. Nothing here serves: the
Triton models run the :mod:`kyc` package, which imports nothing of this one."""
