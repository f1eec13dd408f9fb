"""``kyc bench``: the served pipeline against its limit, its variants and its peers.

The modules depend one way, from the driver down to the measuring core:

- :mod:`kyc_tools.dev.bench.options`: what a run is asked (groups, levels, window, errors);
  :mod:`kyc_tools.dev.bench.measure`: one level's closed loops (or in-process batches) and
  their figures; :mod:`kyc_tools.dev.bench.stats`: Triton's statistics over a level and the
  server's CPU and memory; :mod:`kyc_tools.dev.bench.models`: the run's repository copy and
  in-process ONNX sessions; :mod:`kyc_tools.dev.bench.summary`: the headline, goals, table and
  JSON of a report;
- :mod:`kyc_tools.dev.bench.core`: a run's state (:class:`~kyc_tools.dev.bench.core.Bench`), its
  served scenarios' sweeps and the bench's own server, built on the modules above;
- :mod:`kyc_tools.dev.bench.scenarios`: the scenario groups and
  :func:`~kyc_tools.dev.bench.scenarios.run_bench`, which runs them; the workloads they send:
  :mod:`kyc_tools.dev.bench.kyc` (end to end),
  :mod:`kyc_tools.dev.bench.document` (document reading and its OCR peer),
  :mod:`kyc_tools.dev.bench.liveness` (liveness sessions),
  :mod:`kyc_tools.dev.bench.publish` (the first request after a version switch);
- :mod:`kyc_tools.dev.bench.compare`: ``kyc bench --compare``, running servers side by side;
- :mod:`kyc_tools.dev.bench.report`: the CSVs and plots of a report;
  :mod:`kyc_tools.dev.bench.procmem`: the resident memory of a group of processes.
"""
