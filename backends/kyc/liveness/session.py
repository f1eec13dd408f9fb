"""One liveness session: what each frame showed, and the verdict at END.

Pure code: frames arrive as :class:`Frame` observations (made by the model from
``face_preprocess`` and ``face_embedding`` outputs) with, for a few of them, a
canonical grey view of the face (:class:`kyc.liveness.relief.FaceView`); nothing
here logs (embeddings, poses and views belong to a person).

What a session must show to be live (every threshold is a config parameter):

- ``challenge``: the challenge's moves in order, natural movement on the way forgiven
  as challenge.py says (each move a direction on a measure of the frame, the head
  pose's yaw or pitch today, in degrees of the head);
- ``relief``: the head turns show the relief of a solid face (kyc.liveness.relief):
  the median relief ratio of the most turned views against each baseline view, at
  least ``min_relief``. A print, a screen or a warp of one photo shows none,
  whatever its landmarks say. Every pair, not one baseline view: on a small face the
  detector's landmarks, which align the views, jump by several pixels from one frame
  to the next (a steady head read as 7, 13 and 20 degrees of turn in three frames),
  and one misaligned baseline view spoilt every ratio of its session (measured on
  the bona fide sessions of ``kyc eval liveness``: 3 refused of 28 with the
  sharpest baseline view, 2 with every one);
- ``same_person``: the frames compared (below) against the best frame (the sharpest
  facing the camera, whose embedding the token carries); at most
  ``max_other_person_fraction`` of them below ``face_embedding``'s
  ``review_threshold`` (surely another person: kyc.face.match);
- ``single_face``: one face in at least ``min_single_face_fraction`` of the frames;
- ``sharp_frames``: at least ``min_sharp_frames`` frames with a face at least
  ``min_sharpness`` sharp;
- ``duration``: between ``min_duration_s`` and ``max_duration_s`` from START to END;
- ``passive_pad``: when a passive anti-spoofing model is configured, its mean
  real-face probability at least ``min_pad_score``; otherwise "not_configured" and
  not counted here (the decision counts it: a verdict without passive PAD is of
  lower assurance, kyc.decision.policy).

The head pose of a frame is read from MediaPipe's 468 landmarks (the step's
``landmark_model``, kyc.face.landmarks): five cannot tell a tilted head from a
turned one. A frame whose pose no head makes (kyc.liveness.challenge.plausible), or
whose region the landmark model finds no face in, has no pose: it is neither a move
nor the centre, and is counted in the figures.

Views kept (memory: at most ``baseline_frames`` + 2 x ``relief_views`` of 16 KB a
session): the baseline frames', and per direction of head turn the
``relief_views`` most turned past ``amplitude_deg``.

Which frames are embedded and compared (:meth:`Session.wants_embedding`, decided as
each frame arrives): the first ``baseline_frames`` with a face, every frame turned
away from the baseline by more than ``centre_deg`` (the evidence of the moves), and a
frame facing the camera only when it is sharper, by :data:`FRONTAL_SHARPER_BY`, than
every one facing the camera embedded before it. So the best frame is embedded (or one
within 10% of its sharpness), and every frame that shows a move is compared with it:
a move made by someone else than the person the token names is found, as before.
What is no longer compared is a frame facing the camera that is not the sharpest so
far: it proves no move, and the token does not carry it. The embedding is most of a
frame's cost (face_embedding: about 20 ms of CPU a face here, against 5 for
detection); a person holding still in front of the camera between moves sends
mostly such frames.

LIVENESS_SCORE is 0..1: the mean of the challenge progress (moves done in order
over moves asked), the share of frames of the same person, and the share of sharp
single-face frames; IS_LIVE needs every check to pass, whatever the score.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import cv2
import numpy as np

from kyc.face.quality import head_pose
from kyc.image import MAX_PIXELS_PER_BYTE, ImageLimits
from kyc.liveness.challenge import (
    GUIDANCE,
    MEASURES,
    MOVES,
    YAW,
    Track,
    events,
    guidance,
    parse_moves,
    progress,
    reading,
    yaw_moves,
)
from kyc.liveness.relief import FaceView, relief
from kyc.pipeline.step import where_raised
from kyc.reasons import LIVENESS_REASONS

log = logging.getLogger(__name__)

PAD_NOT_CONFIGURED = "not_configured"


@dataclass(frozen=True)
class LivenessSettings:
    """``liveness_sequence`` parameters (config ``parameters``; defaults here only)."""

    face_model: str = "face_preprocess"
    # Selfie frames show one large face, held upright by the capture app: the
    # detector gets a smaller canvas than face_preprocess's (its cost grows with the
    # canvas area: 640 -> 320 is 4x fewer pixels) and no rotated retries.
    detector_size: int = 320
    try_rotations: bool = False
    # Frames larger than this (longest side) are decoded reduced: a JPEG by libjpeg's
    # DCT scaling, 1/2 or less, which costs a fraction of a full decode. The detector
    # sees 320 pixels and the face is aligned to 112: a selfie frame's face is larger
    # than that at half a 720p frame.
    work_max_side: int = 1600
    embedding_model: str = "face_embedding"
    # The head pose of every frame: MediaPipe's 468 landmarks (kyc.face.landmarks);
    # a face whose region the model reads with a presence under min_face_presence has
    # no pose.
    landmark_model: str = "face_landmarks"
    min_face_presence: float = 0.5
    antispoof_model: str = ""  # empty: passive PAD not configured
    # The crop it takes: the face box enlarged antispoof_scale times, resized to
    # antispoof_size square (MiniFASNet: 2.7 or 4.0, 80).
    antispoof_scale: float = 2.7
    antispoof_size: int = 80
    moves: str = "left,right,up,down"
    challenge_length: int = 3
    # At least this many of a challenge's moves turn the head (left/right): the
    # relief check reads head turns (pitch from five landmarks is less steady).
    min_turns: int = 2
    # A fixed challenge (moves in order) instead of a drawn one, or "from_request" (each
    # START names its own in the request parameter kyc_challenge): only for measuring
    # recorded sequences (`kyc eval liveness` loads it into its private server). A
    # predictable challenge lets a replayed clip pass: `kyc repo check` refuses it in
    # a repository, and the model logs a warning when it is set.
    challenge: str = ""
    amplitude_deg: float = 12.0
    centre_deg: float = 6.0
    min_hold_frames: int = 2
    # Natural movement on the way (a nod while a turn is asked, a move made again)
    # forgiven before the last move: kyc.liveness.challenge.progress. More lets more
    # honest sessions through and more fixed recordings (`kyc eval liveness` says how
    # many of the challenges the best one passes: 1 of 30 with 0, 3 with 1, 5 with 2;
    # real sessions refused for the challenge, docs/eval/liveness.md: 4 of 28 with 1,
    # 2 with 2).
    forgiven_moves: int = 2
    baseline_frames: int = 3
    # The relief check (kyc.liveness.relief): the median relief ratio of the kept
    # views at least this (26 of 28 real sessions measured 0.17 and more, flat and
    # curved prints and one-photo warps 0.12 or less: docs/eval/liveness.md); 0 turns
    # it off.
    min_relief: float = 0.15
    relief_views: int = 2  # views kept per direction of head turn
    max_other_person_fraction: float = 0.1
    min_single_face_fraction: float = 0.8
    min_sharp_frames: int = 5
    min_sharpness: float = 50.0
    min_duration_s: float = 1.0
    max_duration_s: float = 60.0
    max_frames: int = 600  # a session that sends more is answered with an error
    min_pad_score: float = 0.5
    idle_ttl_s: float = 120.0  # sessions idle this long are evicted
    max_sessions: int = 256
    # STARTs a client (the request parameter kyc_client) or a customer (kyc_customer)
    # may make in start_window_s (each instance allows its share, rounded up);
    # abandoned sessions count like others.
    max_starts_per_client: int = 10
    max_starts_per_customer: int = 5
    start_window_s: float = 600.0
    token_ttl_s: float = 120.0
    max_image_bytes: int = 4 * 1024 * 1024
    # A frame is a camera's: 4K UHD, the largest video mode of phones and webcams (the
    # page sends 480 pixels a side). A photo's 40 MP let one 4.9 KB PNG frame cost
    # 0.9 s of CPU and 460 MiB (docs/reliability.md).
    max_image_pixels: int = 3840 * 2160
    max_pixels_per_byte: float = MAX_PIXELS_PER_BYTE

    def frame_limits(self, photo: ImageLimits) -> ImageLimits:
        """The face path's limits for a photo, narrowed to a camera frame's."""
        return replace(photo, max_bytes=min(photo.max_bytes, self.max_image_bytes),
                       max_pixels=min(photo.max_pixels, self.max_image_pixels),
                       max_pixels_per_byte=self.max_pixels_per_byte)

    def check(self) -> None:
        """Refuse settings that cannot work together (at initialize)."""
        moves = parse_moves(self.moves)
        if self.min_relief > 0 and not yaw_moves(moves):
            raise ValueError(f"moves {self.moves!r} has no head turn (left or right), which "
                             "the relief check reads: add one, or set min_relief to 0")
        if self.challenge and self.challenge != "from_request":
            parse_moves(self.challenge)


@dataclass(frozen=True, eq=False)
class Frame:
    """What one frame showed."""

    face_found: bool
    faces: int = 0
    pose: tuple[float, float, float] | None = None  # yaw, pitch, roll; None: no plausible one
    sharpness: float = 0.0
    embedding: np.ndarray | None = None  # L2-normalised, when a face was found
    pad_score: float | None = None  # real-face probability from face_antispoof
    implausible: bool = False  # a face whose pose no head makes (pose is None)
    # Measures of the frame other than the head pose, by name (kyc.liveness.challenge
    # MEASURES read them): none today.
    readings: Mapping[str, float] = field(default_factory=dict)

    def findings(self, settings: LivenessSettings) -> dict:
        """The per-frame part of STATUS: no identity and no angle, only what the app can
        act on (the words to show are STATUS "guidance")."""
        out: dict = {"face_found": self.face_found, "faces": self.faces}
        if self.face_found:
            out["sharp"] = self.sharpness >= settings.min_sharpness
        return out


# A frame facing the camera is embedded when it is sharper than the sharpest embedded
# before it by this share: consecutive frames of one camera differ by a few percent
# (JPEG noise), which would make every other frame a new sharpest one.
FRONTAL_SHARPER_BY = 0.1
# The relief check reads head turns: the offset on the yaw measure.
TURN = list(MEASURES).index(YAW.name)
# kyc.liveness.relief's axis of a head turn (the horizontal)
RELIEF_TURN_AXIS = 0


@dataclass
class TurnView:
    """A view kept for the relief check: how far it turned, its pose, the view."""

    reach: float  # |yaw offset| from the baseline, degrees
    pose: tuple[float, float, float]
    view: FaceView


@dataclass
class Session:
    challenge: tuple[str, ...]
    started: float  # time.monotonic()
    last_seen: float
    frames: list[Frame] = field(default_factory=list)
    # The measures (kyc.liveness.challenge.MEASURES: yaw, pitch) of the first frames with
    # a reading of each (their median is the baseline), and the sharpness of the sharpest
    # frame facing the camera embedded.
    baseline: list[np.ndarray] = field(default_factory=list)
    best_frontal_sharpness: float = -np.inf
    base_views: list[TurnView] = field(default_factory=list)  # the baseline frames' views
    turn_views: dict[int, list[TurnView]] = field(default_factory=dict)  # by yaw sign
    track: Track | None = None  # the zones so far, once the baseline is known
    application: str | None = None  # the START's kyc_application: the token is bound to it

    def add(self, frame: Frame, now: float, settings: LivenessSettings | None = None,
            view: FaceView | None = None) -> None:
        """One more frame (and its face's canonical view, when the model made one)."""
        settings = settings or LivenessSettings()
        self.frames.append(frame)
        self.last_seen = now
        measured = reading(frame)
        if measured is None:
            return
        if len(self.baseline) < settings.baseline_frames:
            self.baseline.append(measured)
            if view is not None:
                self.base_views.append(TurnView(0.0, frame.pose, view))
            if len(self.baseline) == settings.baseline_frames:
                self.track = Track(parse_moves(settings.moves), settings.amplitude_deg,
                                   settings.centre_deg, settings.min_hold_frames)
                for offset in self.offsets(settings):
                    self.track.feed(offset)
            return
        offset = measured - self._baseline()
        if self.track is not None:
            self.track.feed(offset)
        turn = offset[TURN]
        if view is not None and frame.pose is not None and abs(turn) >= settings.amplitude_deg:
            self._keep_turn(TurnView(abs(float(turn)), frame.pose, view),
                            int(np.sign(turn)), settings.relief_views)

    def _keep_turn(self, turn: TurnView, sign: int, keep: int) -> None:
        kept = self.turn_views.setdefault(sign, [])
        kept.append(turn)
        kept.sort(key=lambda t: -t.reach)
        del kept[keep:]

    def _baseline(self) -> np.ndarray:
        return np.median(np.array(self.baseline), axis=0)

    def wants_embedding(self, seen: Frame | tuple[float, float, float] | None,
                        sharpness: float, settings: LivenessSettings) -> bool:
        """Whether the next frame with a face is embedded and compared (see the module
        docstring): ``seen``, the frame without its embedding, or its head pose alone
        (None when no plausible one); ``sharpness``, its sharpness."""
        frame = seen if isinstance(seen, Frame) else Frame(True, pose=seen)
        measured = reading(frame)
        if measured is None or len(self.baseline) < settings.baseline_frames:
            return True
        offset = np.abs(measured - self._baseline()).max()
        if offset > settings.centre_deg:
            return True
        if sharpness > self.best_frontal_sharpness * (1 + FRONTAL_SHARPER_BY):
            self.best_frontal_sharpness = sharpness
            return True
        return False

    def offsets(self, settings: LivenessSettings) -> list[np.ndarray | None]:
        """Each frame's measures (yaw, pitch) minus the baseline (median of the first
        frames with a reading); None where there is no face or no reading (no plausible
        pose)."""
        poses = [reading(f) if f.face_found else None for f in self.frames]
        seen = [p for p in poses if p is not None][: settings.baseline_frames]
        if not seen:
            return [None] * len(poses)
        baseline = np.median(np.stack(seen), axis=0)
        return [None if p is None else p - baseline for p in poses]

    def events(self, settings: LivenessSettings) -> list[str]:
        return events(self.offsets(settings), parse_moves(settings.moves), settings.amplitude_deg,
                      settings.centre_deg, settings.min_hold_frames)

    def progress(self, settings: LivenessSettings) -> dict:
        """Moves done, the next one (told only once the ones before it are done) and
        the words for the person now."""
        found = self.track.found if self.track is not None else []
        done = progress(found, self.challenge, settings.forgiven_moves)
        nxt = self.challenge[done] if done < len(self.challenge) else None
        last = self.frames[-1] if self.frames else None
        if last is not None and not last.face_found:
            words = "no_face"
        elif last is not None and last.faces > 1:
            words = "several_faces"
        else:
            words = ""
        told = GUIDANCE[words] if words else (
            guidance(self.track, self.challenge, done) if self.track is not None
            else GUIDANCE["look"])
        return {"moves_done": done, "moves": len(self.challenge), "next": nxt,
                "instruction": MOVES[nxt].instruction if nxt else None,
                "guidance": told, "frames": len(self.frames)}

    def relief_score(self) -> float | None:
        """The median relief ratio of the kept turned views against each baseline view
        (kyc.liveness.relief); None when the session has no head turn to read."""
        turns = [turn for kept in self.turn_views.values() for turn in kept]
        yaws = {id(t): five_yaw(t.view) for t in [*self.base_views, *turns]}
        ratios = [_relief(base, turn, yaws[id(turn)] - yaws[id(base)])
                  for base in self.base_views for turn in turns]
        if not ratios:
            return None
        read = [r for r in ratios if math.isfinite(r)]  # a view that cannot be read
        return float(np.median(read)) if read else math.nan


def five_yaw(view: FaceView) -> float:
    """The turn the view's five points read (kyc.face.quality.head_pose; the canonical
    square is a similarity of the frame, which leaves yaw as it was). Read at END, for
    the few views kept: not for every frame."""
    return float(head_pose(view.points)[0])


def _relief(base: TurnView, turn: TurnView, five: float) -> float:
    """The relief ratio of one pair of kept views, over the larger of the turns the
    head pose and the five landmarks read (``five``), on the head pose's side. Over the pose's
    turn alone, a print curved round a bottle (which the 468 points read as turning
    less than the five) gave 1.1, against 0.04 over the five points' turn (measured on
    `kyc eval`'s attacks); over the five points' alone, a head tilted while it turned
    (which they read as turning the other way) gave none."""
    head = turn.pose[0] - base.pose[0]
    if not math.isfinite(five):
        return 0.0
    return relief(base.view, turn.view, RELIEF_TURN_AXIS,
                  math.copysign(max(abs(five), abs(head)), head))


def _measured(relief_of: Callable[[Session], float | None], session: Session) -> float | None:
    """The session's relief ratio; NaN (the check fails, it is never passed for want of
    a measure) when measuring it failed: one session's views never fail the batch."""
    try:
        return relief_of(session)
    except (ArithmeticError, ValueError, np.linalg.LinAlgError, cv2.error) as exc:
        log.warning("liveness: the relief could not be measured: %s%s",
                    type(exc).__name__, where_raised(exc))
        return math.nan


@dataclass(frozen=True)
class Verdict:
    is_live: bool
    score: float
    checks: dict  # name -> bool (or PAD_NOT_CONFIGURED, or "off")
    reasons: list[str]  # stable snake_case codes of the failed checks
    figures: dict  # counts and ratios behind the checks (no identity, no angle)
    best_embedding: np.ndarray | None


def best_frame(frames: list[Frame], settings: LivenessSettings, offsets: list) -> int | None:
    """The sharpest frame facing the camera (within the centre band), else the sharpest."""
    candidates = [i for i, f in enumerate(frames) if f.face_found and f.embedding is not None]
    if not candidates:
        return None
    frontal = [i for i in candidates if offsets[i] is not None
               and np.abs(offsets[i]).max() <= settings.centre_deg]
    return max(frontal or candidates, key=lambda i: frames[i].sharpness)


def judge(session: Session, settings: LivenessSettings, ended: float,
          match_threshold: float,
          relief_of: Callable[[Session], float | None] = Session.relief_score) -> Verdict:
    """The verdict of a finished session; ``match_threshold``: the cosine below which
    two faces are surely two people (``face_embedding``'s review threshold); ``relief_of``:
    the session's relief ratio (tests of the other checks give one)."""
    frames = session.frames
    total = max(len(frames), 1)
    offsets = session.offsets(settings)
    found_events = session.events(settings)
    done = progress(found_events, session.challenge, settings.forgiven_moves)
    best = best_frame(frames, settings, offsets)
    with_face = [f for f in frames if f.face_found]
    compared = [f for f in with_face if f.embedding is not None]
    if best is not None:
        reference = frames[best].embedding
        similar = [float(np.dot(f.embedding, reference)) for f in compared]
        same_share = sum(s >= match_threshold for s in similar) / len(similar)
    else:
        same_share = 0.0
    single = sum(f.faces == 1 for f in frames) / total
    sharp = sum(f.face_found and f.faces == 1 and f.sharpness >= settings.min_sharpness
                for f in frames)
    duration = ended - session.started
    checks: dict = {"challenge": done == len(session.challenge)}
    if settings.min_relief > 0:
        ratio = _measured(relief_of, session)
        checks["relief"] = ratio is not None and math.isfinite(ratio) \
            and ratio >= settings.min_relief
    else:
        checks["relief"] = "off"
    checks.update({
        "same_person": best is not None and 1 - same_share <= settings.max_other_person_fraction,
        "single_face": single >= settings.min_single_face_fraction,
        "sharp_frames": sharp >= settings.min_sharp_frames,
        "duration": settings.min_duration_s <= duration <= settings.max_duration_s,
    })
    pad = [f.pad_score for f in frames if f.pad_score is not None]
    if settings.antispoof_model:
        checks["passive_pad"] = bool(pad) and float(np.mean(pad)) >= settings.min_pad_score
    else:
        checks["passive_pad"] = PAD_NOT_CONFIGURED
    reasons = [REASONS[name] for name, ok in checks.items() if ok is False]
    score = float(np.mean([done / max(len(session.challenge), 1), same_share, sharp / total]))
    figures = {
        "frames": len(frames), "frames_with_face": len(with_face),
        "frames_compared": len(compared),
        "frames_without_plausible_pose": sum(f.implausible for f in frames),
        "moves_done": done, "moves": len(session.challenge),
        "same_person_share": round(same_share, 3), "single_face_share": round(single, 3),
        "sharp_frames": sharp, "duration_s": round(duration, 2),
    }
    if pad:
        figures["pad_score"] = round(float(np.mean(pad)), 3)
    is_live = all(ok is True or ok in (PAD_NOT_CONFIGURED, "off") for ok in checks.values())
    return Verdict(is_live, round(score, 4), checks, reasons, figures,
                   None if best is None else frames[best].embedding)


# Each check's name -> the reason code its failure gives (declared in kyc.reasons).
REASONS = {r.check: r.code for r in LIVENESS_REASONS}
