"""The CPU sessions of the local ``onnxruntime`` backend: a run of a batch in slices, and
onnxruntime's session with the model's run options (OpenVINO's: :mod:`.openvino`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


def _rows(feeds: Mapping[str, np.ndarray]) -> int:
    """A run's batch: the first dimension of its largest batched feed."""
    return max((a.shape[0] for a in feeds.values() if np.ndim(a)), default=0)


class SlicedSession:
    """A session that runs a batch of more than ``max_run_batch`` items in slices
    (``_run`` runs one), so the server and the bench's in-process limit run it alike."""

    max_run_batch = 0

    def run(self, output_names, feeds):
        batch = _rows(feeds)
        if not self.max_run_batch or batch <= self.max_run_batch:
            return self._run(output_names, feeds)
        slices = [self._run(output_names, {name: a[start:start + self.max_run_batch]
                                           for name, a in feeds.items()})
                  for start in range(0, batch, self.max_run_batch)]
        return [np.concatenate(parts, axis=0) for parts in zip(*slices, strict=True)]

    def _run(self, output_names, feeds):
        raise NotImplementedError


class ConfiguredSession(SlicedSession):
    """An onnxruntime session with the model's run options (arena shrinkage, after runs
    of more than ``shrink_above_batch`` items)."""

    def __init__(self, session, run_options=None, shrink_above_batch: int = 0,
                 max_run_batch: int = 0) -> None:
        self.session = session
        self.run_options = run_options
        self.shrink_above_batch = shrink_above_batch
        self.max_run_batch = max_run_batch

    def _run(self, output_names, feeds):
        options = self.run_options
        if options is not None and self.shrink_above_batch and \
                _rows(feeds) <= self.shrink_above_batch:
            options = None
        return self.session.run(output_names, feeds, options)

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self.session.get_outputs()


