"""``kyc eval``: each model version's quality on labelled data, through the real server.

- :mod:`kyc.eval.metrics`: the field's measures, pure (FNMR/FMR/EER/DET, APCER/BPCER,
  ROC AUC);
- :mod:`kyc.eval.data`: the labelled folders and CSV a user points it at;
- :mod:`kyc.eval.server`: a private Triton over the repository, one version at a time;
- :mod:`kyc.eval.faces`, :mod:`~kyc.eval.documents`, :mod:`~kyc.eval.liveness`,
  :mod:`~kyc.eval.antifraud`: the four measures;
- :mod:`kyc.eval.report`: JSON, Markdown and plots; :mod:`kyc.eval.samples`: the data we
  may ship the tests with, rendered or fetched.

Tooling: no served model imports it.
"""
