"""``kyc_decision``: the last step of ``kyc_ensemble``.

Per ``execute``, gather -> run -> scatter (:func:`kyc.pipeline.step.batched`): gather
the requests whose chain of custody holds (:mod:`kyc.decision.custody`: a request that
did not come through ``kyc_ensemble`` is refused before anything of it is read); run
ONE BLS call to ``face_embedding`` with the attested faces of the whole batch, then
for every request the face match (cosine of the two embeddings), the liveness token
(opened with the shared key: genuine, unexpired, live, and the selfie is the face it
holds), the document (MRZ checks, expiry, age, visual zone against MRZ), then ONE BLS
call to ``antifraud`` with the feature vectors of the whole batch; scatter the policy's
answer to each request. A request whose inputs do not fit answers alone; a failing
antifraud model answers the batch with INTERNAL. Logs carry counts and timings, never
names, numbers, embeddings or tokens.

:class:`DecisionStep` is free of Triton: served through :mod:`kyc.pipeline.triton`
(antifraud through one BLS call), run in process by :mod:`kyc.local`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import date
from typing import Any

import numpy as np

from kyc.decision.custody import CUSTODY_INPUTS, check_custody, token_bytes
from kyc.decision.features import FEATURES, FEATURES_VERSION, Observation, vector
from kyc.decision.ledger import (
    Ledger,
    LedgerUnavailableError,
    MemoryLedger,
    Spend,
    ledger_from_environ,
)
from kyc.decision.policy import DecisionSettings, Findings, LivenessEvidence, decide
from kyc.face.match import FaceThresholds
from kyc.intake.admission import TICKET_TENSOR, TicketReturns
from kyc.keys import derive_key, load_key
from kyc.liveness.token import TokenError, TokenExpiredError, TokenSealer
from kyc.pipeline.contract import BLS, Contract, Use
from kyc.pipeline.modelconfig import Repository, version_dirs
from kyc.pipeline.seal import SEAL_LABEL, SealClaims, Sealer, digest
from kyc.pipeline.step import (
    Answer,
    IsReady,
    Request,
    RequestError,
    StepContext,
    UnavailableError,
    batched,
    require,
    run_valid,
)
from kyc.verdict import VerdictSigner, application_ref, finite

log = logging.getLogger(__name__)

# The antifraud model: [N, len(FEATURES)] float32 feature vectors -> N fraud scores.
FraudScorer = Callable[[np.ndarray], np.ndarray]
# The embedding model: [N, 112, 112, 3] uint8 aligned faces -> [N, D] embeddings.
Embedder = Callable[[np.ndarray], np.ndarray]

INPUTS = ("DOC_FACE_FOUND", "DOC_FACE", "DOC_NUM_FACES", "DOC_QUALITY",
          "SELFIE_FACE_FOUND", "SELFIE_FACE", "SELFIE_NUM_FACES", "SELFIE_QUALITY",
          "DOCUMENT", "TEXT_LINES", "LIVENESS_TOKEN")


class FeatureMismatchError(RuntimeError):
    """The served antifraud model was trained on another feature vector."""


def check_antifraud_features(repository: Repository, model: str) -> None:
    """Refuse to start when the latest antifraud version's metadata names other features."""
    import onnx

    try:
        latest = repository.latest_version(model)
    except FileNotFoundError as exc:
        raise FeatureMismatchError(str(exc)) from None
    onnx_model = onnx.load(str(latest / "model.onnx"), load_external_data=False)
    meta = {p.key: p.value for p in onnx_model.metadata_props}
    if meta.get("kyc.features", "").split(",") != list(FEATURES):
        raise FeatureMismatchError(
            f"{model} {latest.name} was trained on features "
            f"{meta.get('kyc.features_version', 'of unknown version')}, kyc_decision builds "
            f"{FEATURES_VERSION}: retrain it (kyc models antifraud train)")


def _application(request: Request) -> str | None:
    """The client's ``kyc_application`` parameter; a bad one is the client's error."""
    try:
        return application_ref(request.parameters)
    except ValueError as exc:
        raise RequestError(str(exc)) from None


def _holder(application: str | None, seal: SealClaims) -> str:
    """Who spends a token (kyc.decision.ledger): a digest of the application and the
    images, the same for a retry of one verification, nothing of the customer in it."""
    return digest(f"{application or ''}|{seal.document}|{seal.selfie}".encode())


def _read_text(arrays: Mapping[str, np.ndarray]) -> bool:
    """Whether the document's reading (TEXT_LINES, attested) holds a line."""
    try:
        return bool(json.loads(_text(arrays["TEXT_LINES"], 0)))
    except (KeyError, IndexError, ValueError):
        return False


def _text(array: np.ndarray, row: int) -> str:
    value = array[row].reshape(-1)[0]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Checked:
    """A request whose chain of custody holds, with kyc_intake's seal of it, checked."""

    request: Request
    seal: SealClaims


@dataclass(frozen=True)
class Prepared:
    """One request's findings, ready for the antifraud score and the policy."""

    observation: Observation
    liveness: LivenessEvidence
    visual: list[str]  # the text lines read outside the MRZ
    features: np.ndarray  # antifraud's input vector
    application: str | None  # the client's kyc_application
    token_id: str | None  # the liveness token spent here (None: none was)
    quality: dict[str, Any]  # of both faces
    seal: SealClaims  # kyc_intake's, checked
    today: date  # the day of the batch: of the features' and the policy's age and expiry


@dataclass(frozen=True)
class Scored:
    """A prepared request with antifraud's score of it: all that its answer needs."""

    prepared: Prepared
    fraud: float


class DecisionStep:
    """``kyc_decision``: the one source of truth of what it answers.

    A batch of requests' input arrays -> per request the face match, the liveness
    token and the document checks -> ONE ``score`` call with the feature vectors of
    the whole batch -> the policy -> per request its output arrays, or the
    exception it is answered with (:class:`RequestError`: INVALID_ARG, else
    INTERNAL). ``score`` is the antifraud model, ``[N, len(FEATURES)]`` float32 ->
    N fraud scores; what it raises fails the whole batch.
    """

    CONTRACT = Contract(
        settings=DecisionSettings, budget="antifraud", inputs=(*INPUTS, *CUSTODY_INPUTS),
        outputs=("DECISION", "FACE_MATCH_SCORE", "LIVENESS_SCORE", "FRAUD_SCORE", "REPORT"),
        # the attested faces are embedded here: face matching's work, and its budget's;
        # the embedding model's thresholds are also read
        uses={"antifraud_model": Use(BLS), "embedding_model": Use(BLS, budget="face_match")})

    def __init__(self, settings: DecisionSettings, faces: FaceThresholds,
                 sealer: TokenSealer, score: FraudScorer, embed: Embedder,
                 custody: Sealer, today: Callable[[], date] = date.today,
                 admission: TicketReturns | None = None,
                 clock: Callable[[], float] = time.time, ledger: Ledger | None = None,
                 signer: VerdictSigner | None = None,
                 repository: Repository | None = None, is_ready: IsReady | None = None) -> None:
        self.settings = settings
        self.faces = faces
        self.sealer = sealer
        self.score = score
        self.embed = embed
        self.custody = custody  # checks the pipeline's seal and attestations
        self.today = today
        self.admission = admission  # kyc_intake's tickets, given back here
        self.clock = clock
        self.ledger = ledger or MemoryLedger(clock)  # spent liveness tokens
        self.signer = signer  # None: verdicts go unsigned (a step built without a key)
        self.repository = repository  # the model versions each verdict names
        self.is_ready = is_ready  # which of them serve (None: the newest of each)
        self._models: dict[str, int] = {}  # read once per execute

    @classmethod
    def from_context(cls, context: StepContext) -> DecisionStep:
        """kyc_decision's ``parameters``, the face threshold of its embedding model, a
        check of the antifraud model's features, and the token key (:func:`load_key`)."""
        settings = context.settings(DecisionSettings)
        faces = FaceThresholds.from_parameters(
            context.repository.parameters(settings.embedding_model))
        check_antifraud_features(context.repository, settings.antifraud_model)
        antifraud = context.callee(settings.antifraud_model, ["FRAUD_SCORE"])
        embedder = context.callee(settings.embedding_model, ["EMBEDDING"])
        key = load_key(context.environ)  # tokens, the pipeline's seal, the verdict's signature
        return cls(settings, faces, TokenSealer(key),
                   lambda features: antifraud({"FEATURES": features})["FRAUD_SCORE"],
                   lambda faces: embedder({"FACE": faces})["EMBEDDING"],
                   Sealer(derive_key(key, SEAL_LABEL)),
                   admission=TicketReturns() if context.in_server else None,
                   ledger=ledger_from_environ(context.environ, context.in_server),
                   signer=VerdictSigner(key), repository=context.repository,
                   is_ready=context.is_ready)

    def give_back(self, requests: Sequence[Request]) -> None:
        """Give back the admission tickets of ``requests``, whose chain of custody holds
        (their work is done but for this step's): each teaches the admission limit when
        its document's reading found text (kyc.intake.admission: a map forged in place of
        ocr_det's reads nothing)."""
        if self.admission is not None:
            self.admission.give_back([(r.inputs[TICKET_TENSOR], _read_text(r.inputs))
                                      for r in requests if TICKET_TENSOR in r.inputs],
                                     self.clock())

    def run(self, requests: Sequence[Request]) -> list[Answer]:
        """One answer per request, in order: gather the requests whose chain of custody
        holds, run the batch once (:meth:`_decide`), scatter an answer to each."""
        return batched(requests, self._checked, self._decide, self._answer)

    def _checked(self, request: Request) -> list[Checked]:
        """The request with its seal, checked with its whole chain of custody; a
        RequestError saying why not, which answers the request at gathering."""
        try:
            seal = check_custody(self.custody, request.inputs, self.clock(),
                                 self.settings.seal_max_age_s, _application(request))
        except RequestError as exc:
            raise RequestError(f"kyc_decision: {exc}") from None
        return [Checked(request, seal)]

    def _decide(self, checked: list[Checked]) -> list[Scored | Exception]:
        """The batch's tickets given back (a forged or replayed seal gives none), ONE
        embedding call, each request's findings (or the error that answers it alone),
        ONE antifraud call over those found, and the versions serving the verdicts."""
        self.give_back([c.request for c in checked])
        embeddings = self._embeddings([c.request.inputs for c in checked])
        today = self.today()
        prepared = [self._prepared(c, e, today) for c, e in zip(checked, embeddings, strict=True)]
        scored = run_valid(prepared, self._scored)
        self._models = self._serving_versions()
        return scored

    def _prepared(self, checked: Checked, embeddings: tuple[np.ndarray, np.ndarray],
                  today: date) -> Prepared | Exception:
        """What the request's findings are, or the exception it is answered with."""
        try:
            application = _application(checked.request)
            return self._prepare(checked.request.inputs, embeddings, today, application,
                                 checked.seal)
        except LedgerUnavailableError as exc:
            return UnavailableError(f"kyc_decision: {exc}: retry")
        except RequestError as exc:  # the client's: its message is for the client
            return RequestError(f"kyc_decision: {exc}")
        except Exception as exc:  # a bug or an upstream step's bad tensor: this request
            return exc  # only, reported by its type, never its text

    def _answer(self, mine: list[Scored | Exception]) -> Answer:
        """The request's answer from its one item (scatter answers with what this
        raises, for this request only: reported by its type)."""
        item, = mine
        return item if isinstance(item, Exception) else self._outputs(item.prepared, item.fraud)

    def _embeddings(self, inputs: list[Mapping[str, np.ndarray]]
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """(document, selfie) embeddings of each request's attested faces, one call."""
        if not inputs:
            return []
        faces = np.stack([a[name][0] for a in inputs for name in ("DOC_FACE", "SELFIE_FACE")])
        out = np.asarray(self.embed(faces), np.float32).reshape(len(faces), -1)
        return [(out[2 * k], out[2 * k + 1]) for k in range(len(inputs))]

    def _serving_versions(self) -> dict[str, int]:
        """Each model of the repository serving this verdict, with the version serving it
        (the highest one ready: the ensemble and the BLS calls ask for the newest)."""
        if self.repository is None:
            return {}
        versions = {}
        for folder in sorted(p for p in self.repository.root.iterdir()
                             if (p / "config.pbtxt").is_file()):
            for version in reversed([int(v.name) for v in version_dirs(folder)]):
                if self.is_ready is None or self.is_ready(folder.name, version):
                    versions[folder.name] = version
                    break
        return versions

    def _scored(self, rows: list[Prepared]) -> list[Scored]:
        """ONE antifraud call with the feature vectors of ``rows`` (none without rows);
        a model answering another number of scores fails the batch (``zip``'s
        ``strict``, and :func:`run_valid`'s count)."""
        if not rows:
            return []
        scores = np.asarray(self.score(np.stack([p.features for p in rows])),
                            np.float32).reshape(-1)
        return [Scored(p, fraud) for p, fraud in zip(rows, scores.tolist(), strict=True)]

    def _prepare(self, arrays: Mapping[str, np.ndarray],
                 embeddings: tuple[np.ndarray, np.ndarray], today: date,
                 application: str | None, seal: SealClaims) -> Prepared:
        require(arrays, INPUTS)
        doc_found = bool(arrays["DOC_FACE_FOUND"].reshape(-1)[0])
        selfie_found = bool(arrays["SELFIE_FACE_FOUND"].reshape(-1)[0])
        doc_emb, selfie_emb = embeddings
        match = float(np.dot(doc_emb, selfie_emb)) if doc_found and selfie_found else -1.0
        document = json.loads(_text(arrays["DOCUMENT"], 0))
        lines = json.loads(_text(arrays["TEXT_LINES"], 0))
        # ocr_postprocess marks the lines it read as MRZ lines; they are the MRZ when
        # one was found, and the rest is the visual zone.
        read_as_mrz = ({k for k, line in enumerate(lines) if line.get("mrz")}
                       if (document.get("mrz") or {}).get("lines") else set())
        visual = [line["text"] for k, line in enumerate(lines) if k not in read_as_mrz]
        mrz_conf = [lines[k]["confidence"] for k in read_as_mrz]
        liveness, token_id = self._liveness(token_bytes(arrays), selfie_emb, selfie_found,
                                            application, _holder(application, seal))
        quality = {"selfie": json.loads(_text(arrays["SELFIE_QUALITY"], 0)),
                   "document_face": json.loads(_text(arrays["DOC_QUALITY"], 0))}
        observation = Observation(
            face_match_score=match, document_face_found=doc_found,
            selfie_face_found=selfie_found,
            selfie_faces=int(arrays["SELFIE_NUM_FACES"].reshape(-1)[0]),
            liveness_score=liveness.score, liveness_live=liveness.valid and liveness.live,
            liveness_match=(liveness.selfie_similarity
                            if liveness.selfie_similarity is not None else -1.0),
            document=document, mrz_confidence=float(np.mean(mrz_conf)) if mrz_conf else 0.0,
            selfie_quality=quality["selfie"], document_face_quality=quality["document_face"])
        return Prepared(observation, liveness, visual, vector(observation, today), application,
                        token_id, quality, seal, today)

    def _liveness(self, token: bytes, selfie: np.ndarray, selfie_found: bool,
                  application: str | None, holder: str) -> tuple[LivenessEvidence, str | None]:
        """What the token says, and its id when it was spent here (one token, one
        verification: kyc.decision.ledger)."""
        if not token:
            return LivenessEvidence(provided=False), None
        try:
            claims = self.sealer.open(token, self.clock())
        except TokenError as exc:
            return LivenessEvidence(provided=True, expired=isinstance(exc, TokenExpiredError),
                                    problem=str(exc)), None
        problem = self._binding_problem(claims.application, application)
        if problem is not None:
            return LivenessEvidence(provided=True, problem=problem), None
        spent = self.ledger.spend(claims.token_id, claims.issued_at, claims.expires_at, holder)
        if not spent.accepted:
            return _unspendable(spent), None
        return self._evidence(claims, selfie, selfie_found), claims.token_id

    def _binding_problem(self, bound: str | None, given: str | None) -> str | None:
        if bound is None:
            return ("token is bound to no application: its START named no kyc_application"
                    if self.settings.require_bound_token else None)
        if bound != given:
            return "token is bound to another application than this request's kyc_application"
        return None

    @staticmethod
    def _evidence(claims: Any, selfie: np.ndarray, selfie_found: bool) -> LivenessEvidence:
        similarity = None
        if (selfie_found and claims.embedding is not None
                and claims.embedding.shape == selfie.shape):
            similarity = float(np.dot(claims.embedding, selfie))
        return LivenessEvidence(provided=True, valid=True, live=claims.is_live,
                                passive_pad=claims.passive_pad, score=claims.score,
                                selfie_similarity=similarity)

    def _outputs(self, item: Prepared, fraud: float) -> dict[str, np.ndarray]:
        obs, liveness = item.observation, item.liveness
        findings = Findings(obs.face_match_score, obs.document_face_found, obs.selfie_face_found,
                            obs.selfie_faces, liveness, obs.document, item.visual, fraud)
        decision, reasons, figures = decide(findings, self.settings, self.faces, item.today)
        report = self._report(item, fraud, decision, reasons, figures)
        return {
            "DECISION": np.array([[decision.encode()]], dtype=np.object_),
            "FACE_MATCH_SCORE": np.array([[obs.face_match_score]], dtype=np.float32),
            "LIVENESS_SCORE": np.array([[liveness.score if liveness.valid else -1.0]],
                                       dtype=np.float32),
            "FRAUD_SCORE": np.array([[fraud]], dtype=np.float32),
            "REPORT": np.array([[json.dumps(report).encode()]], dtype=np.object_),
        }

    def _report(self, item: Prepared, fraud: float, decision: str, reasons: list[str],
                figures: Mapping[str, Any]) -> dict[str, Any]:
        """REPORT: every figure behind the decision, signed whole (kyc.verdict)."""
        obs = item.observation
        report = {
            "decision": decision,
            "reasons": reasons,
            "face": {"match_score": round(obs.face_match_score, 4),
                     "match_threshold": self.faces.match,
                     "review_threshold": self.faces.review,
                     "document_face_found": obs.document_face_found,
                     "selfie_face_found": obs.selfie_face_found,
                     "selfie_faces": obs.selfie_faces, "quality": item.quality},
            "liveness": {k: (round(v, 4) if isinstance(v, float) else v)
                         for k, v in asdict(item.liveness).items()},
            "document": {**obs.document, "age": figures["age"],
                         "visual_zone": figures["visual_zone"],
                         "visual_zone_consistent": figures["visual_zone_consistent"]},
            "fraud_score": round(fraud, 4),
            # what antifraud saw, in its pinned order (explains fraud_score)
            "fraud_features": {name: round(float(v), 4)
                               for name, v in zip(FEATURES, item.features, strict=True)},
            "policy": {k: figures[k] for k in ("min_age", "fraud_review_threshold",
                                               "fraud_reject_threshold")},
            "application": item.application,
            "issued_at": int(self.clock()),
            # the digests of the images kyc_intake sealed (kyc.verdict.image_digest)
            "images": {"document": item.seal.document, "selfie": item.seal.selfie},
            "liveness_token": item.token_id,
            "models": self._models,
        }
        return self.signer.sign(report) if self.signer is not None else finite(report)


def _unspendable(spent: Spend) -> LivenessEvidence:
    """The evidence of a genuine token the ledger did not let this verification spend."""
    if spent is Spend.UNKNOWN:  # it may have been spent in a ledger now forgotten
        return LivenessEvidence(provided=True, expired=True,
                                problem="token was issued before the ledger of spent tokens "
                                        "began (a restart): make a new liveness session")
    return LivenessEvidence(provided=True, reused=True,
                            problem="token was spent by an earlier verification")
