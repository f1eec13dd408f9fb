"""``kyc eval``: each model version's quality on labelled data, through the real server.

- :mod:`kyc_tools.dev.eval.metrics`: the field's measures, pure (FNMR/FMR/EER/DET, APCER/BPCER,
  ROC AUC);
- :mod:`kyc_tools.dev.eval.data`: the labelled folders and CSV a user points it at;
- :mod:`kyc_tools.dev.eval.server`: a private Triton over the repository, one version at a time;
- :mod:`kyc_tools.dev.eval.faces`, :mod:`~kyc_tools.dev.eval.documents`,
  :mod:`~kyc_tools.dev.eval.liveness`, :mod:`~kyc_tools.dev.eval.antifraud`: the four measures;
- :mod:`kyc_tools.dev.eval.report`: JSON, Markdown and plots;
  :mod:`kyc_tools.dev.eval.samples`: the data we may ship the tests with, rendered or fetched.

Tooling: no served model imports it.
"""

# The models of document_ocr whose versions `kyc eval documents --model` compares (the
# first by default); here, where the command line reads it without the measures' imports.
DOCUMENT_MODELS = ("ocr_rec", "mrz_rec", "ocr_det")
# The model whose versions each other measure compares.
MEASURED = {"faces": "face_embedding", "liveness": "liveness_sequence",
            "antifraud": "antifraud"}
