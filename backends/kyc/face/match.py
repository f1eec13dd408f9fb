"""The face-match thresholds of an embedding model, read from its config ``parameters``.

They belong to the weights (a new model needs its own, chosen again by ``kyc eval faces``):

- ``match_threshold``: the cosine of two embeddings at or above which they are surely one
  person (the evaluation's FMR target, docs/models.md);
- ``review_threshold``: below it they are surely two people. Between the two a person
  looks (the review band). Absent, it is the match threshold: no band.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MATCH_KEY, REVIEW_KEY = "match_threshold", "review_threshold"


@dataclass(frozen=True)
class FaceThresholds:
    match: float
    review: float

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, str]) -> FaceThresholds:
        """The thresholds of a model's ``parameters``; a review threshold above the match
        threshold is a configuration error."""
        match = float(parameters[MATCH_KEY])
        review = float(parameters.get(REVIEW_KEY) or match)
        if review > match:
            raise ValueError(f"{REVIEW_KEY} {review} is above {MATCH_KEY} {match}")
        return cls(match, review)
