"""For the operator: ``kyc serve``, the supervisor that runs in production (locally, in
the image, on every replica). :mod:`~kyc_tools.operator.server` starts and stops Triton
with the keys and options, :mod:`~kyc_tools.operator.triton` where Triton comes from,
:mod:`~kyc_tools.operator.watcher` and :mod:`~kyc_tools.operator.live` the live copy of
the model repository that takes dropped versions, :mod:`~kyc_tools.operator.drain` the
drain on stop, :mod:`~kyc_tools.operator.procs` the processes it owns."""
