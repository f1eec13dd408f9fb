"""``kyc bench``: the served pipeline against its limit, its variants and its peers.

The modules depend one way, from the driver down to the measuring core:

- :mod:`kyc_tools.bench.core`: what is measured and how (options, closed-loop levels,
  Triton's statistics, the bench's server, its memory) and the report;
- :mod:`kyc_tools.bench.scenarios`: the scenario groups and
  :func:`~kyc_tools.bench.scenarios.run_bench`, which runs them; the workloads they send:
  :mod:`kyc_tools.bench.kyc` (end to end),
  :mod:`kyc_tools.bench.document` (document reading and its OCR peer),
  :mod:`kyc_tools.bench.liveness` (liveness sessions), :mod:`kyc_tools.bench.publish` (the first
  request after a version switch);
- :mod:`kyc_tools.bench.compare`: ``kyc bench --compare``, running servers side by side;
- :mod:`kyc_tools.bench.report`: the CSVs and plots of a report; :mod:`kyc_tools.bench.procmem`:
  the resident memory of a group of processes.
"""
