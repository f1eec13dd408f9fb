"""The face path of one ``execute``: decode -> letterbox -> ONE detector call -> align.

:class:`FacePreprocessor` is independent of Triton: the detector is a callable
taking a ``[N, S, S, 3]`` uint8 batch and returning ``(LOC, SCORES, LANDMARKS)``.
Served, it is one BLS call to ``face_detector``; in tests, anything.

Per image the steps are: decode (limits checked on the header), letterbox into
the shared square canvas, one detector call for the whole batch, vectorised
decoding and NMS, choice of the face (largest and most central), and for the
images without a confident, plausible upright face, one more detector call
with the three other quarter turns of each (a phone photo whose orientation tag
was lost), keeping the best plausible candidate by score.

RetinaFace does find faces lying on their side or upside down, with high
scores but landmarks in the wrong places. Measured on the real test photos: a
90-degree turn reads as a roll of 65-90 degrees; a 180-degree turn as an
upright face scoring 0.96-0.994 whose landmarks sit 7-30 pixels (112-pixel
crop) off the template, where the same faces upright score >= 0.9997 with
landmarks 1-8 pixels off. Hence "plausible": eye line within
``max_upright_roll`` degrees of horizontal and landmarks within
``max_template_error`` of the template; and "confident": score >=
``upright_score``. Upright photos that are not confident cost the extra call
only: the best candidate is still the upright one.
The chosen landmarks give the similarity transform onto the ArcFace template.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kyc.face.align import FACE_SIZE, template_error, warp_face
from kyc.face.geometry import choose_face, unrotate_box, unrotate_points
from kyc.face.quality import face_quality
from kyc.face.retinaface import Detections, detect_batch
from kyc.image import DecodedImage, ImageError, decode_image, letterbox
from kyc.intake import IntakeSettings
from kyc.pipeline.step import StepError

log = logging.getLogger(__name__)

Detector = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


class FaceProcessingError(StepError):
    """An unexpected failure on one image (answered INTERNAL, the others go on)."""


@dataclass(frozen=True)
class FaceSettings:
    """``face_preprocess`` parameters (config ``parameters``; defaults here only)."""

    detector_model: str = "face_detector"  # its max_batch_size splits a larger batch
    detector_size: int = 640  # side of the square canvas the detector sees
    score_threshold: float = 0.7
    nms_iou: float = 0.4
    min_face_size: float = 20.0  # input pixels, short side of the face box
    try_rotations: bool = True
    max_upright_roll: float = 45.0  # degrees; beyond, the image is tried in other turns
    max_template_error: float = 12.0  # 112-px crop; upright real photos measured <= 8
    upright_score: float = 0.995  # below, the other quarter turns are tried too
    # The client's image limits are kyc_intake's (the model that owns them); this
    # model only chooses the size it works at.
    limits_model: str = "kyc_intake"
    work_max_side: int = 1600
    # The five-point head pose in QUALITY (yaw, pitch, roll); liveness frames read
    # theirs from the 468 landmarks instead and leave this out (2 ms a frame).
    head_pose: bool = True


@dataclass
class FaceResult:
    """What ``face_preprocess`` answers for one image."""

    face: np.ndarray = field(default_factory=lambda: np.zeros((FACE_SIZE, FACE_SIZE, 3), np.uint8))
    found: bool = False
    box: np.ndarray = field(default_factory=lambda: np.zeros(4, np.float32))
    landmarks: np.ndarray = field(default_factory=lambda: np.zeros((5, 2), np.float32))
    score: float = 0.0
    faces: int = 0
    rotation: int = 0  # degrees counter-clockwise the pixels were turned to find the face
    template_error: float = 0.0  # largest landmark distance from the template, 112-px crop
    plausible: bool = False  # upright-looking landmarks (see the module docstring)
    quality: dict | None = None
    context: Any = None  # see FacePreprocessor(context=...)

    def report(self) -> dict:
        figures = {"landmark_error": round(self.template_error, 2)} if self.found else {}
        return {"face_found": self.found, "faces": self.faces, "rotation": self.rotation,
                **figures, **(self.quality or {})}


@dataclass
class _Work:
    """One decoded image on its way through the batch."""

    image: DecodedImage
    result: FaceResult | None = None


# (decoded pixels, face box x1 y1 x2 y2 and landmarks [5, 2] in those pixels) -> what
# the caller keeps of each found face's pixels (liveness: its canonical view and crop)
ContextCrop = Callable[[np.ndarray, np.ndarray, np.ndarray], Any]


class FacePreprocessor:
    def __init__(self, settings: FaceSettings, detector: Detector,
                 context: ContextCrop | None = None,
                 client_limits: IntakeSettings | None = None) -> None:
        """``detector`` takes any batch size (a :class:`kyc.pipeline.step.Callee` splits
        it at the detector's ``max_batch_size``). ``context``: when given, each found
        face also gets ``result.context`` made from the decoded pixels around it (e.g.
        the crop a passive anti-spoofing model takes, the canonical view of the relief
        check), while the pixels are at hand.
        ``client_limits``: the byte and pixel limits (default: kyc_intake's defaults)."""
        self.settings = settings
        self.detector = detector
        self.context = context
        self.limits = (client_limits or IntakeSettings()).image_limits(settings.work_max_side)

    def run(self, images: Sequence[bytes]) -> list[FaceResult | ImageError | FaceProcessingError]:
        """One result per encoded image, in order; bad images get their own ImageError,
        an unexpected failure on one image its own FaceProcessingError."""
        started = time.perf_counter()
        results: list = [None] * len(images)
        work: dict[int, _Work] = {}
        for i, data in enumerate(images):
            try:
                work[i] = _Work(decode_image(data, self.limits))
            except ImageError as exc:
                results[i] = exc
        decoded = time.perf_counter()
        upright = self._detect([(i, w.image.pixels, 0) for i, w in work.items()])
        for i, (detections, shape) in upright.items():
            work[i].result = self._pick(work[i].image, detections, 0, shape)
        missing = [i for i, w in work.items() if not self._confident(w.result)]
        if missing and self.settings.try_rotations:
            self._retry_rotated(missing, work)
        for i, w in work.items():
            try:
                results[i] = self._finish(w)
            except Exception as exc:  # one image's failure must not cost the others
                # Type only: a traceback's values may hold the person's pixels.
                log.error("face_preprocess: alignment failed for image %d of %d: %s", i,
                          len(images), type(exc).__name__)
                results[i] = FaceProcessingError(f"the face could not be processed: "
                                                 f"{type(exc).__name__}")
        log.debug(
            "face_preprocess: %d images (%d undecodable, %d retried rotated) decode %.1f ms, "
            "total %.1f ms",
            len(images), len(images) - len(work), len(missing),
            (decoded - started) * 1e3, (time.perf_counter() - started) * 1e3,
        )
        return results  # type: ignore[return-value]

    # -- detection ---------------------------------------------------------------------
    def _detect(self, jobs: list[tuple[object, np.ndarray, int]]) -> dict:
        """{key: (Detections in pixels of the turned image, turned shape)} for jobs of
        (key, pixels, quarter turns): all canvases in one detector call (chunked only
        beyond the detector's max batch size, by the detector callable)."""
        if not jobs:
            return {}
        turned_images = [np.rot90(pixels, turns) if turns else pixels for _, pixels, turns in jobs]
        size = self._canvas_size(turned_images)
        canvases, frames = [], []
        for turned in turned_images:
            canvas, box = letterbox(turned, size)
            canvases.append(canvas)
            frames.append((box, turned.shape[:2]))
        loc, scores, landmarks = self.detector(np.stack(canvases))
        found: list[Detections] = detect_batch(loc, scores, landmarks, size, size,
                                               self.settings.score_threshold,
                                               self.settings.nms_iou)
        out = {}
        for (key, _, _), det, (box, shape) in zip(jobs, found, frames, strict=True):
            out[key] = (Detections(box.to_image(det.boxes), det.scores,
                                   box.to_image(det.landmarks)), shape)
        return out

    def _confident(self, result: FaceResult) -> bool:
        return result.plausible and result.score >= self.settings.upright_score

    def _canvas_size(self, images: list[np.ndarray]) -> int:
        """The batch's square canvas: ``detector_size``, or less when every image is
        smaller (small images are not blown up: the detector's cost grows with the
        canvas), rounded up to the detector's stride of 32."""
        largest = max(max(image.shape[:2]) for image in images)
        side = min(self.settings.detector_size, -(-largest // 32) * 32)
        return max(side, 64)

    def _retry_rotated(self, missing: list[int], work: dict[int, _Work]) -> None:
        """The other three quarter turns of every image without a face, in one call."""
        turns = (1, 2, 3)
        found = self._detect([((i, t), work[i].image.pixels, t) for i in missing for t in turns])
        for i in missing:
            candidates = [work[i].result] + [
                self._pick(work[i].image, found[(i, t)][0], t, found[(i, t)][1]) for t in turns
            ]
            work[i].result = max(candidates, key=lambda r: (r.found, r.plausible, r.score))

    def _pick(self, image: DecodedImage, detections: Detections, turns: int,
              shape: tuple[int, int]) -> FaceResult:
        min_size = self.settings.min_face_size / image.scale
        index = choose_face(detections.boxes, shape, min_size)
        faces = int(np.sum(np.minimum(detections.boxes[:, 2] - detections.boxes[:, 0],
                                      detections.boxes[:, 3] - detections.boxes[:, 1]) >= min_size))
        if index is None:
            return FaceResult(faces=0)
        seen = detections.landmarks[index].astype(np.float64)
        eyes = seen[1] - seen[0]
        roll = abs(math.degrees(math.atan2(eyes[1], eyes[0])))
        error = template_error(seen)
        original = image.pixels.shape[:2]
        return FaceResult(
            found=True,
            box=unrotate_box(detections.boxes[index], turns, original),
            landmarks=unrotate_points(seen, turns, original),
            score=float(detections.scores[index]),
            faces=faces,
            rotation=90 * turns,
            template_error=error,
            plausible=(roll <= self.settings.max_upright_roll
                       and error <= self.settings.max_template_error),
        )

    # -- alignment ---------------------------------------------------------------------
    def _finish(self, work: _Work) -> FaceResult:
        result, image = work.result, work.image
        if result is None or not result.found:
            return FaceResult(faces=0 if result is None else result.faces)
        result.face = warp_face(image.pixels, result.landmarks)
        if self.context is not None:
            result.context = self.context(image.pixels, result.box, result.landmarks)
        # Report geometry in input pixels (the image as displayed, EXIF applied).
        result.box = (result.box * image.scale).astype(np.float32)
        result.landmarks = (result.landmarks * image.scale).astype(np.float32)
        result.quality = face_quality(result.face, result.landmarks, result.box, image.input_size,
                                      pose=self.settings.head_pose)
        return result


def result_tensors(results: Sequence[FaceResult]) -> dict[str, np.ndarray]:
    """The ``face_preprocess`` outputs for a request's images (leading batch dimension)."""
    return {
        "FACE": np.stack([r.face for r in results]).astype(np.uint8),
        "FACE_FOUND": np.array([[r.found] for r in results], dtype=np.bool_),
        "BOX": np.stack([r.box for r in results]).astype(np.float32),
        "LANDMARKS": np.stack([r.landmarks for r in results]).astype(np.float32),
        "DET_SCORE": np.array([[r.score] for r in results], dtype=np.float32),
        "NUM_FACES": np.array([[r.faces] for r in results], dtype=np.int32),
        "QUALITY": np.array([[json.dumps(r.report(), sort_keys=True).encode()] for r in results],
                            dtype=np.object_),
    }
