"""``face_preprocess`` as a step: encoded images -> aligned faces, one detector call.

Gather every image of every request -> one :class:`FacePreprocessor` run (the
detector called once, split only past its ``max_batch_size``) -> scatter one answer
per request. A bad image answers its own request (INVALID_ARG, naming ``IMAGE`` or
``IMAGE[k]``); a failing detector answers the whole batch. The face path is built
here once: ``liveness_sequence`` reuses :func:`face_preprocessor`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kyc.face import preprocess
from kyc.face.preprocess import FacePreprocessor, FaceSettings, result_tensors
from kyc.image import ImageError
from kyc.intake import IntakeSettings
from kyc.pipeline.contract import BLS, SETTINGS, Contract, Use
from kyc.pipeline.seal import Sealer, attestations, digest, pipeline_sealer
from kyc.pipeline.step import Answer, Request, RequestError, StepContext, batched, encoded_items

log = logging.getLogger(__name__)

DETECTOR_OUTPUTS = ("LOC", "SCORES", "LANDMARKS")


def face_detector(context: StepContext, model: str) -> preprocess.Detector:
    """The face detector ``model`` as a callable: a canvas batch -> its three outputs."""
    call = context.callee(model, DETECTOR_OUTPUTS)

    def detect(batch):
        out = call({"IMAGES": batch})
        return out["LOC"], out["SCORES"], out["LANDMARKS"]

    return detect


def face_preprocessor(context: StepContext, settings: FaceSettings,
                      crop: preprocess.ContextCrop | None = None) -> FacePreprocessor:
    """The face path with ``settings``: its detector and the client limits' owner."""
    return FacePreprocessor(settings, face_detector(context, settings.detector_model), crop,
                            context.model_settings(IntakeSettings, settings.limits_model))


# What kyc_decision reads of this step, under its attestation (kyc.pipeline.seal)
ATTESTED = ("FACE", "FACE_FOUND", "NUM_FACES", "QUALITY")
ATTESTATION_KIND = "face"


class FacePreprocessStep:
    CONTRACT = Contract(
        settings=FaceSettings, budget="face_match", inputs=("IMAGE",),
        outputs=("FACE", "FACE_FOUND", "BOX", "LANDMARKS", "DET_SCORE", "NUM_FACES", "QUALITY",
                 "ATTESTATION"),
        uses={"detector_model": Use(BLS), "limits_model": Use(SETTINGS)})

    def __init__(self, preprocessor: FacePreprocessor, sealer: Sealer | None = None) -> None:
        self.preprocessor = preprocessor
        self.sealer = sealer  # None: no token key, nothing attested

    @classmethod
    def from_context(cls, context: StepContext) -> FacePreprocessStep:
        settings = context.settings(FaceSettings)
        log.info("%s: detector %s at %dx%d, score >= %.2f", context.model,
                 settings.detector_model, settings.detector_size, settings.detector_size,
                 settings.score_threshold)
        return cls(face_preprocessor(context, settings), pipeline_sealer(context.environ))

    def run(self, requests: Sequence[Request]) -> list[Answer]:
        return batched(requests, lambda r: encoded_items(r.inputs, "IMAGE"),
                       lambda images: list(zip(self.preprocessor.run(images), images,
                                               strict=True)),
                       self._answer)

    def _answer(self, mine: list) -> Answer:
        answer = _answer([result for result, _ in mine])
        if isinstance(answer, Exception):
            return answer
        answer["ATTESTATION"] = attestations(self.sealer, ATTESTATION_KIND,
                                             [digest(image) for _, image in mine], answer,
                                             ATTESTED)
        return answer


def _answer(mine: list) -> Answer:
    """One request's answer from its images' FaceResults (or their errors)."""
    for k, result in enumerate(mine):
        if isinstance(result, Exception):
            where = "IMAGE" if len(mine) == 1 else f"IMAGE[{k}]"
            kind = RequestError if isinstance(result, ImageError) else type(result)
            return kind(f"{where}: {result}")
    return result_tensors(mine)  # type: ignore[arg-type]
