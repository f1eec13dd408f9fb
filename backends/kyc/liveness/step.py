"""``liveness_sequence`` as a step: the liveness session (sequence batching).

Each request is one frame of one session (its correlation id), with the control
inputs START, END and READY. Per ``execute``: evict idle sessions, apply START
(a new random challenge, its first move told; a START for a live id resets it; a
client or customer that started too many sessions lately, by the request parameters
``kyc_client`` and ``kyc_customer``, is refused), then decode and detect
the faces of ALL frames of the batch in one face path run (the face step's
:func:`kyc.face.step.face_preprocessor`, ONE call to ``face_detector``, the
settings of ``face_preprocess``), read each found face's head pose from
MediaPipe's 468 landmarks in one call to ``face_landmarks`` (kyc.face.landmarks),
embed the faces the sessions compare
(:meth:`kyc.liveness.session.Session.wants_embedding`) in one call to
``face_embedding`` (and one to the passive anti-spoofing model when configured;
each split only past its ``max_batch_size``), add each frame to its session
with the canonical view of its face (kyc.liveness.relief), and answer with the
progress and the words for the person (never angles).
At END the session is judged, sealed into LIVENESS_TOKEN and freed.

Errors answer their own request only: a frame of a sequence without START, an
undecodable frame, a session past ``max_frames``. Logs carry counts, shapes and
timings, never frames, poses of a person, embeddings or tokens.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kyc.face.landmarks import Roi, mesh_pose, roi
from kyc.face.match import FaceThresholds
from kyc.face.preprocess import FaceSettings
from kyc.face.step import FacePreprocessStep, face_preprocessor
from kyc.image import ImageError
from kyc.keys import load_key
from kyc.liveness.challenge import MOVES, draw_challenge, parse_moves, plausible
from kyc.liveness.metrics import SessionMetrics
from kyc.liveness.relief import FaceView, face_view
from kyc.liveness.session import (
    PAD_NOT_CONFIGURED,
    Frame,
    LivenessSettings,
    Session,
    Verdict,
    judge,
)
from kyc.liveness.store import SessionLimitError, SessionStore, StartLimiter, StartLimitError
from kyc.liveness.token import LivenessClaims, TokenSealer
from kyc.pipeline.contract import BLS, SETTINGS, Contract, Use
from kyc.pipeline.modelconfig import instance_count
from kyc.pipeline.step import Answer, Request, RequestError, StepContext, encoded_items
from kyc.verdict import application_ref

log = logging.getLogger(__name__)


@dataclass
class _Item:
    """One request of this execute, and what became of it."""

    sid: Any
    start: bool
    end: bool
    frame: bytes | None = None
    error: Exception | None = None
    result: Frame | None = None
    view: FaceView | None = None
    session: Session | None = None
    parameters: dict | None = None


@dataclass(frozen=True, eq=False)
class FaceCrops:
    """What the face path keeps of a frame's pixels for a session: the canonical view
    (relief), the region the landmark model reads (head pose) and, when passive PAD
    is configured, its crop."""

    view: FaceView
    mesh_crop: np.ndarray  # uint8 [192, 192, 3]
    roi: Roi
    size: tuple[int, int]  # the frame's width and height, pixels
    pad: np.ndarray | None = None


# The request parameters that name who starts a session (read at START only).
CLIENT_PARAMETER = "kyc_client"
CUSTOMER_PARAMETER = "kyc_customer"
# Measuring recorded sequences only (the ``challenge`` setting "from_request", which
# `kyc repo check` refuses in a served repository): START names the session's challenge.
CHALLENGE_PARAMETER = "kyc_challenge"
CHALLENGE_FROM_REQUEST = "from_request"


class LivenessStep:
    CONTRACT = Contract(
        settings=LivenessSettings, budget="liveness", inputs=("FRAME",),
        outputs=("STATUS", "IS_LIVE", "LIVENESS_SCORE", "LIVENESS_TOKEN"),
        # face_model: face_preprocess's settings, and the face path run on them here
        uses={"face_model": Use(SETTINGS, acts_as=f"{FacePreprocessStep.__module__}:"
                                                   f"{FacePreprocessStep.__name__}"),
              "embedding_model": Use(BLS),  # and its thresholds
              "landmark_model": Use(BLS),
              "antispoof_model": Use(BLS)})  # empty: passive PAD not configured

    def __init__(self, context: StepContext) -> None:
        self.settings = context.settings(LivenessSettings)
        self.settings.check()
        self.moves = parse_moves(self.settings.moves)
        self.fixed = (parse_moves(self.settings.challenge)
                      if self.settings.challenge not in ("", CHALLENGE_FROM_REQUEST) else None)
        self.told = self.settings.challenge == CHALLENGE_FROM_REQUEST
        face = dataclasses.replace(
            context.model_settings(FaceSettings, self.settings.face_model),
            detector_size=self.settings.detector_size, try_rotations=self.settings.try_rotations,
            work_max_side=self.settings.work_max_side, head_pose=False)
        self.face = face_preprocessor(context, face, self._crops)
        # the face path checks a photo's limits; a frame is held to a camera's
        self.face.limits = self.settings.frame_limits(self.face.limits)
        self.embed = context.callee(self.settings.embedding_model, ["EMBEDDING"])
        self.mesh = context.callee(self.settings.landmark_model, ["MESH", "PRESENCE"])
        self.antispoof = (context.callee(self.settings.antispoof_model, ["REAL"])
                          if self.settings.antispoof_model else None)
        self.faces = FaceThresholds.from_parameters(
            context.repository.parameters(self.settings.embedding_model))
        self.sealer = TokenSealer(load_key(context.environ))
        self.store = SessionStore(self.settings.max_sessions, self.settings.idle_ttl_s)
        # Each instance holds its own counts, and a client's STARTs may land on any
        # instance: each allows its share, so that all of them together allow the limit
        # (rounded up to a multiple of the instances).
        instances = max(instance_count(context.config), 1)
        self.limits = {
            CLIENT_PARAMETER: StartLimiter(-(-self.settings.max_starts_per_client // instances),
                                           self.settings.start_window_s),
            CUSTOMER_PARAMETER: StartLimiter(
                -(-self.settings.max_starts_per_customer // instances),
                self.settings.start_window_s)}
        self.metrics = SessionMetrics(context.model, context.version, context.in_server)
        log.info("%s: moves %s x%d, passive PAD %s, at most %d sessions idle %.0f s",
                 context.model, ",".join(self.moves), self.settings.challenge_length,
                 self.settings.antispoof_model or PAD_NOT_CONFIGURED,
                 self.settings.max_sessions, self.settings.idle_ttl_s)
        if self.fixed or self.told:
            log.warning("%s: every session gets the challenge %s (for measuring recorded "
                        "sequences only: a replayed clip passes it)", context.model,
                        ",".join(self.fixed) if self.fixed else "its START names")

    @classmethod
    def from_context(cls, context: StepContext) -> LivenessStep:
        return cls(context)

    def _crops(self, pixels: np.ndarray, box: np.ndarray, landmarks: np.ndarray) -> FaceCrops:
        """The face path's hook: what a session keeps of a found face's pixels."""
        pad = None
        if self.settings.antispoof_model:
            from kyc.liveness.crop import context_crop

            pad = context_crop(pixels, box, self.settings.antispoof_scale,
                               self.settings.antispoof_size)
        region = roi(landmarks)
        return FaceCrops(face_view(pixels, landmarks), region.cut(pixels), region,
                         (pixels.shape[1], pixels.shape[0]), pad)

    def close(self) -> None:
        self.metrics.close()

    def moves_seen(self, sid: Any, amplitude_deg: float | None = None) -> list[str] | None:
        """The moves a live session showed so far, whatever its challenge (past
        ``amplitude_deg``, by default the configured one); None when no such session. For
        tooling in this process that labels recordings with the moves they hold (``kyc
        eval samples``): never told in a reply (a replayed clip could be tuned with it)."""
        session = self.store.get(sid)
        if session is None:
            return None
        settings = self.settings if amplitude_deg is None else dataclasses.replace(
            self.settings, amplitude_deg=amplitude_deg)
        return session.events(settings)

    # -- execute --------------------------------------------------------------------
    def run(self, requests: Sequence[Request]) -> list[Answer]:
        started = time.perf_counter()
        now = time.monotonic()
        evicted = self.store.evict_idle(now)
        self.metrics.evicted(evicted)
        items = [self._item(r) for r in requests]
        for item in items:
            if item.error is None:
                self._bind(item, now)
        self._observe([i for i in items if i.error is None and i.frame])
        answers = [self._respond(item, time.monotonic()) for item in items]
        self.metrics.live(len(self.store))
        log.info("%s: %d frames, %d sessions live (%d evicted) in %.1f ms", "liveness_sequence",
                 sum(1 for i in items if i.result is not None), len(self.store), evicted,
                 (time.perf_counter() - started) * 1e3)
        return answers

    def _item(self, request: Request) -> _Item:
        """Control inputs, correlation id and frame of one request."""
        try:
            controls = {n: request.inputs[n] for n in ("START", "END", "READY")
                        if n in request.inputs}
            flag = {name: bool(np.asarray(controls[name]).ravel()[0]) if name in controls
                    else False for name in ("START", "END", "READY")}
            item = _Item(request.correlation_id, flag["START"], flag["END"],
                         parameters=dict(request.parameters))
            if "READY" in controls and not flag["READY"]:
                item.error = RequestError("not a frame of a live sequence (READY is false)")
                return item
            frames = encoded_items(request.inputs, "FRAME")
            if len(frames) != 1:
                raise RequestError(f"FRAME must hold one frame per request, got {len(frames)}")
            item.frame = frames[0]
            if len(item.frame) > self.settings.max_image_bytes:
                raise RequestError(f"FRAME is {len(item.frame)} bytes, more than the "
                                   f"{self.settings.max_image_bytes} allowed")
        except RequestError as exc:
            return _Item(None, False, False, error=exc)
        return item

    def _bind(self, item: _Item, now: float) -> None:
        """The item's session: a new one at START, the live one otherwise."""
        if item.start:
            refused = self._refused(item.parameters or {}, now)
            if refused is not None:
                item.error = refused
                return
            try:
                challenge = self._challenge_for(item.parameters or {})
                application = application_ref(item.parameters or {})
            except (RequestError, ValueError) as exc:
                item.error = RequestError(str(exc))
                return
            try:
                if self.store.start(item.sid, Session(challenge, now, now,
                                                      application=application)):
                    self.metrics.restarted()
            except SessionLimitError as exc:
                item.error = exc
                return
            self.metrics.started()
        session = self.store.get(item.sid)
        if session is None:
            item.error = RequestError(
                "this sequence has no live session: send START first (sessions idle for "
                f"{self.settings.idle_ttl_s:.0f} s are dropped)")
            return
        if not item.start and len(session.frames) >= self.settings.max_frames:
            item.error = RequestError(f"a session holds at most {self.settings.max_frames} "
                                      "frames: send END")
            return
        item.session = session

    def _challenge_for(self, parameters: dict) -> tuple[str, ...]:
        """A new session's challenge: drawn at random, or (measuring only) fixed or
        named by START's ``kyc_challenge`` parameter."""
        if self.fixed:
            return self.fixed
        if self.told:
            try:
                return parse_moves(str(parameters.get(CHALLENGE_PARAMETER, "")))
            except ValueError as exc:
                raise RequestError(f"START must name its challenge ({CHALLENGE_PARAMETER}): "
                                   f"{exc}") from None
        return draw_challenge(self.moves, self.settings.challenge_length,
                              min_turns=self.settings.min_turns)

    def _refused(self, parameters: dict, now: float) -> StartLimitError | None:
        """The error for a START over a client's or customer's limit (each named by a
        request parameter), else None after counting the START against both."""
        keys = {name: str(parameters[name]) for name in self.limits
                if parameters.get(name) not in (None, "")}
        for name, key in keys.items():
            wait = self.limits[name].retry_after_s(key, now)
            if wait > 0:
                who = "client" if name == CLIENT_PARAMETER else "customer"
                self.metrics.refused(who)
                return StartLimitError(f"this {who} started too many liveness sessions lately: "
                                       f"try again in {math.ceil(wait)} s")
        for name, key in keys.items():
            self.limits[name].count(key, now)
        return None

    def _observe(self, items: list[_Item]) -> None:
        """Faces of every frame in one face path run; the found faces' landmarks,
        embeddings (and anti-spoofing scores when configured) in batched BLS calls."""
        if not items:
            return
        results = self.face.run([i.frame for i in items])  # type: ignore[misc]
        seen = []
        for item, result in zip(items, results, strict=True):
            if isinstance(result, Exception):
                item.error = (RequestError(f"FRAME: {result}") if isinstance(result, ImageError)
                              else result)
            else:
                seen.append((item, result))
        poses = self._poses([r for _, r in seen])
        # In order, so that two frames of one session in this batch are decided as if
        # they had come one by one (Session.wants_embedding).
        embed = [result.found and item.session.wants_embedding(  # type: ignore[union-attr]
                     pose, _sharpness(result), self.settings)
                 for (item, result), pose in zip(seen, poses, strict=True)]
        chosen = [r for (_, r), e in zip(seen, embed, strict=True) if e]
        embeddings = iter(self._each(self.embed, "FACE", [r.face for r in chosen]))
        found = [r for _, r in seen if r.found]
        pad = iter(self._each(self.antispoof, "CROP", [r.context.pad for r in found])
                   if self.antispoof is not None else [])
        for (item, result), embedded, pose in zip(seen, embed, poses, strict=True):
            item.view = result.context.view if result.found and result.context else None
            item.result = Frame(
                face_found=result.found, faces=result.faces, pose=pose,
                sharpness=_sharpness(result),
                embedding=np.asarray(next(embeddings), np.float32) if embedded else None,
                pad_score=float(np.asarray(next(pad)).reshape(-1)[0])
                if result.found and self.settings.antispoof_model else None,
                implausible=result.found and pose is None)

    def _poses(self, results: list) -> list[tuple[float, float, float] | None]:
        """Each result's head pose from the 468 landmarks (kyc.face.landmarks), in one
        call to the landmark model; None without a face, or where the model sees none
        in the region or the pose is one no head makes."""
        has = [r.found and r.context is not None for r in results]
        crops = [r.context for r, found in zip(results, has, strict=True) if found]
        if not crops:
            return [None] * len(results)
        out = self.mesh({"FACE": np.stack([c.mesh_crop for c in crops])})
        read = iter([self._pose(c, mesh, presence) for c, mesh, presence
                     in zip(crops, out["MESH"], out["PRESENCE"], strict=True)])
        return [next(read) if found else None for found in has]

    def _pose(self, crops: FaceCrops, mesh: np.ndarray,
              presence: np.ndarray) -> tuple[float, float, float] | None:
        if float(np.ravel(presence)[0]) < self.settings.min_face_presence:
            return None
        pose = mesh_pose(crops.roi.to_image(mesh), *crops.size)
        return pose if plausible(pose[0], pose[1]) else None

    @staticmethod
    def _each(callee, name: str, arrays: list) -> list[np.ndarray]:
        """The callee's one output for each array (one call, split past its batch size)."""
        if not arrays:
            return []
        (out,) = callee({name: np.stack(arrays)}).values()
        return list(out)

    # -- responses ------------------------------------------------------------------
    def _respond(self, item: _Item, now: float) -> Answer:
        if item.error is not None:
            if item.end and item.session is not None:  # a bad last frame still ends it
                self.store.end(item.sid)
            return item.error
        session = item.session
        assert session is not None
        if item.result is not None:
            session.add(item.result, now, self.settings, item.view)
            self.store.touch(item.sid)
        status: dict[str, Any] = {"state": "in_progress"}
        if item.start:
            status = {"state": "started", "challenge": self._challenge(session)}
        if item.result is not None:
            status["frame"] = item.result.findings(self.settings)
        status["progress"] = session.progress(self.settings)
        status["guidance"] = status["progress"].pop("guidance")
        if not item.end:
            status["sessions"] = self._sessions()
            return self._outputs(status, False, -1.0, b"")
        self.store.end(item.sid)
        status["sessions"] = self._sessions()
        # a frame counts as another person when surely so: below the review threshold
        verdict = judge(session, self.settings, now, self.faces.review)
        self.metrics.ended(verdict.is_live)
        status.update({"state": "done", "is_live": verdict.is_live, "score": verdict.score,
                       "reasons": verdict.reasons, "checks": verdict.checks,
                       "figures": verdict.figures,
                       "passive_pad": verdict.checks["passive_pad"]})
        return self._outputs(status, verdict.is_live, verdict.score,
                             self._token(item.sid, session, verdict))

    def _sessions(self) -> dict:
        """How many sessions this instance holds, and has evicted idle (no identities)."""
        return {"live": len(self.store), "evicted_idle": self.store.evicted}

    def _challenge(self, session: Session) -> dict:
        """What START tells: how many moves and the first one only (each next move is
        told in "progress" once the one before it is done: no challenge to shop for)."""
        s = self.settings
        first = session.challenge[0]
        return {
            "length": len(session.challenge),
            "next": first,
            "instruction": MOVES[first].instruction,
            "how": ("face the camera, then make each move as it is asked (a move counts "
                    f"past {s.amplitude_deg:g} degrees of the head: about 20 is plenty), "
                    "holding it a moment and coming back to face the camera before the "
                    "next; the next move is told once the one before it is done; what "
                    "you do after the last one does not count; frames as the camera sees "
                    "them, not mirrored"),
            "min_duration_s": s.min_duration_s,
            "max_duration_s": s.max_duration_s,
            "max_frames": s.max_frames,
            "passive_pad": "configured" if s.antispoof_model else PAD_NOT_CONFIGURED,
        }

    def _token(self, sid: Any, session: Session, verdict: Verdict) -> bytes:
        issued = time.time()
        return self.sealer.seal(LivenessClaims(
            session=str(sid), is_live=verdict.is_live, score=verdict.score, issued_at=issued,
            expires_at=issued + self.settings.token_ttl_s, challenge=session.challenge,
            embedding=verdict.best_embedding, checks=dict(verdict.checks),
            application=session.application, token_id=secrets.token_hex(16)))

    @staticmethod
    def _outputs(status: dict, is_live: bool, score: float, token: bytes) -> Answer:
        return {
            "STATUS": np.array([[json.dumps(status).encode()]], dtype=np.object_),
            "IS_LIVE": np.array([[is_live]], dtype=np.bool_),
            "LIVENESS_SCORE": np.array([[score]], dtype=np.float32),
            "LIVENESS_TOKEN": np.array([[token]], dtype=np.object_),
        }


def _sharpness(result) -> float:
    return float((result.quality or {}).get("sharpness", 0.0))
