"""``kyc_decision``: the last step of ``kyc_ensemble``.

Per ``execute``: every request's chain of custody (:mod:`kyc.decision.custody`: a
request that did not come through ``kyc_ensemble`` is refused before anything of it
is read); ONE BLS call to ``face_embedding`` with the attested faces of the whole
batch; then for every request the face match (cosine of the two embeddings),
the liveness token (opened with the shared key: genuine, unexpired, live, and the
selfie is the face it holds), the document (MRZ checks, expiry, age, visual zone
against MRZ); then ONE BLS call to ``antifraud`` with the feature vectors of the
whole batch; then the policy. A request whose inputs do not fit answers alone; a
failing antifraud model answers the batch with INTERNAL. Logs carry counts and
timings, never names, numbers, embeddings or tokens.

:class:`DecisionStep` is free of Triton: served through :mod:`kyc.pipeline.triton`
(antifraud through one BLS call), run in process by :mod:`kyc.pipeline.local`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from datetime import date
from typing import Any

import numpy as np

from kyc.decision.custody import CUSTODY_INPUTS, check_custody
from kyc.decision.features import FEATURES, FEATURES_VERSION, Observation, vector
from kyc.decision.ledger import Ledger, LedgerUnavailableError, MemoryLedger, ledger_from_environ
from kyc.decision.policy import DecisionSettings, Findings, LivenessEvidence, decide
from kyc.intake.admission import TicketReturns
from kyc.liveness.token import TokenError, TokenExpiredError, TokenSealer, load_key
from kyc.pipeline.contract import BLS, Contract, Use
from kyc.pipeline.modelconfig import Repository
from kyc.pipeline.seal import SEAL_LABEL, SealClaims, Sealer, derive_key, digest
from kyc.pipeline.step import (
    Answer,
    Request,
    RequestError,
    StepContext,
    UnavailableError,
    require,
)
from kyc.verdict import VerdictSigner, application_ref

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


def _text(array: np.ndarray, row: int) -> str:
    value = array[row].reshape(-1)[0]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


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
        # the embedding model's match_threshold is also read
        uses={"antifraud_model": Use(BLS), "embedding_model": Use(BLS, budget="face_match")})

    def __init__(self, settings: DecisionSettings, match_threshold: float,
                 sealer: TokenSealer, score: FraudScorer, embed: Embedder,
                 custody: Sealer, today: Callable[[], date] = date.today,
                 admission: TicketReturns | None = None,
                 clock: Callable[[], float] = time.time, ledger: Ledger | None = None,
                 signer: VerdictSigner | None = None,
                 repository: Repository | None = None) -> None:
        self.settings = settings
        self.match_threshold = match_threshold
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
        self._models: dict[str, int] = {}  # read once per execute

    @classmethod
    def from_context(cls, context: StepContext) -> DecisionStep:
        """kyc_decision's ``parameters``, the face threshold of its embedding model, a
        check of the antifraud model's features, and the token key (:func:`load_key`)."""
        settings = context.settings(DecisionSettings)
        match_threshold = float(
            context.repository.parameters(settings.embedding_model)["match_threshold"])
        check_antifraud_features(context.repository, settings.antifraud_model)
        antifraud = context.callee(settings.antifraud_model, ["FRAUD_SCORE"])
        embedder = context.callee(settings.embedding_model, ["EMBEDDING"])
        key = load_key(context.environ)  # tokens, the pipeline's seal, the verdict's signature
        return cls(settings, match_threshold, TokenSealer(key),
                   lambda features: antifraud({"FEATURES": features})["FRAUD_SCORE"],
                   lambda faces: embedder({"FACE": faces})["EMBEDDING"],
                   Sealer(derive_key(key, SEAL_LABEL)),
                   admission=TicketReturns() if context.in_server else None,
                   ledger=ledger_from_environ(context.environ), signer=VerdictSigner(key),
                   repository=context.repository)

    def give_back(self, requests: Sequence[Request]) -> None:
        """Give back the admission tickets of the customers of ``requests`` (their work
        is done but for this step's)."""
        if self.admission is not None:
            self.admission.give_back_requests(requests, self.clock())

    def run(self, requests: Sequence[Request]) -> list[Answer]:
        """One answer per request, in order."""
        now = self.clock()
        checked: list[Any] = []
        for request in requests:
            try:
                checked.append(check_custody(self.custody, request.inputs, now,
                                             self.settings.seal_max_age_s))
            except RequestError as exc:
                checked.append(RequestError(f"kyc_decision: {exc}"))
        self.give_back([r for r, c in zip(requests, checked, strict=True)
                        if not isinstance(c, Exception)])  # a forged ticket is not given back
        ok = [r.inputs for r, c in zip(requests, checked, strict=True)
              if not isinstance(c, Exception)]
        embeddings = iter(self._embeddings(ok))
        today = self.today()
        prepared: list[Any] = []
        for request, check in zip(requests, checked, strict=True):
            if isinstance(check, Exception):
                prepared.append(check)
                continue
            try:
                application = _application(request)
                prepared.append({**self._prepare(request.inputs, next(embeddings), today,
                                                 application, _holder(application, check)),
                                 "seal": check})
            except LedgerUnavailableError as exc:
                prepared.append(UnavailableError(f"kyc_decision: {exc}: retry"))
            except RequestError as exc:  # the client's: its message is for the client
                prepared.append(RequestError(f"kyc_decision: {exc}"))
            except Exception as exc:  # a bug or an upstream step's bad tensor: this
                prepared.append(exc)  # request only, reported by its type, never its text
        rows = [p for p in prepared if not isinstance(p, Exception)]
        scores = self._fraud_scores([p["features"] for p in rows], self.score)
        self._models = self._model_versions()
        answers: list[Answer] = []
        k = 0
        for item in prepared:
            if isinstance(item, Exception):
                answers.append(item)
                continue
            try:
                answers.append(self._outputs(item, float(scores[k]), today))
            except Exception as exc:  # this request only (reported by its type)
                answers.append(exc)
            k += 1
        return answers

    def _embeddings(self, inputs: list[Mapping[str, np.ndarray]]
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """(document, selfie) embeddings of each request's attested faces, one call."""
        if not inputs:
            return []
        faces = np.stack([a[name][0] for a in inputs for name in ("DOC_FACE", "SELFIE_FACE")])
        out = np.asarray(self.embed(faces), np.float32).reshape(len(faces), -1)
        return [(out[2 * k], out[2 * k + 1]) for k in range(len(inputs))]

    def _signed(self, item: dict[str, Any], decision: str, reasons: list[str]) -> dict[str, Any]:
        """What the verdict's signature covers (kyc.verdict)."""
        seal: SealClaims = item["seal"]
        return {"decision": decision, "reasons": list(reasons),
                "application": item["application"], "issued_at": int(self.clock()),
                "images": {"document": seal.document, "selfie": seal.selfie},
                "liveness_token": item["token_id"], "models": self._models}

    def _model_versions(self) -> dict[str, int]:
        """The newest version of every model in the repository serving this verdict."""
        if self.repository is None:
            return {}
        root = self.repository.root
        versions = {}
        for folder in sorted(p for p in root.iterdir() if (p / "config.pbtxt").is_file()):
            try:
                versions[folder.name] = int(self.repository.latest_version(folder.name).name)
            except (FileNotFoundError, ValueError):
                continue
        return versions

    @staticmethod
    def _fraud_scores(features: list[np.ndarray], score: FraudScorer) -> np.ndarray:
        if not features:
            return np.zeros(0, np.float32)
        return np.asarray(score(np.stack(features)), np.float32).reshape(-1)

    def _prepare(self, arrays: Mapping[str, np.ndarray],
                 embeddings: tuple[np.ndarray, np.ndarray], today: date,
                 application: str | None, holder: str) -> dict[str, Any]:
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
        liveness, token_id = self._liveness(arrays["LIVENESS_TOKEN"].reshape(-1)[0],
                                            selfie_emb, selfie_found, application, holder)
        selfie_quality = json.loads(_text(arrays["SELFIE_QUALITY"], 0))
        doc_quality = json.loads(_text(arrays["DOC_QUALITY"], 0))
        observation = Observation(
            face_match_score=match, document_face_found=doc_found,
            selfie_face_found=selfie_found,
            selfie_faces=int(arrays["SELFIE_NUM_FACES"].reshape(-1)[0]),
            liveness_score=liveness.score, liveness_live=liveness.valid and liveness.live,
            liveness_match=(liveness.selfie_similarity
                            if liveness.selfie_similarity is not None else -1.0),
            document=document, mrz_confidence=float(np.mean(mrz_conf)) if mrz_conf else 0.0,
            selfie_quality=selfie_quality, document_face_quality=doc_quality)
        return {"observation": observation, "liveness": liveness, "visual": visual,
                "features": vector(observation, today), "application": application,
                "token_id": token_id,
                "quality": {"selfie": selfie_quality, "document_face": doc_quality}}

    def _liveness(self, token: Any, selfie: np.ndarray, selfie_found: bool,
                  application: str | None, holder: str) -> tuple[LivenessEvidence, str | None]:
        """What the token says, and its id when it was spent here (one token, one
        verification: kyc.decision.ledger)."""
        data = token if isinstance(token, bytes) else str(token).encode()
        if not data:
            return LivenessEvidence(provided=False), None
        try:
            claims = self.sealer.open(data)
        except TokenError as exc:
            return LivenessEvidence(provided=True, expired=isinstance(exc, TokenExpiredError),
                                    problem=str(exc)), None
        problem = self._binding_problem(claims.application, application)
        if problem is not None:
            return LivenessEvidence(provided=True, problem=problem), None
        if not self.ledger.spend(claims.token_id, claims.expires_at, holder):
            return LivenessEvidence(provided=True, reused=True,
                                    problem="token was spent by an earlier verification"), None
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

    def _outputs(self, item: dict[str, Any], fraud: float, today: date
                 ) -> dict[str, np.ndarray]:
        obs: Observation = item["observation"]
        liveness: LivenessEvidence = item["liveness"]
        findings = Findings(obs.face_match_score, obs.document_face_found, obs.selfie_face_found,
                            obs.selfie_faces, liveness, obs.document, item["visual"], fraud)
        decision, reasons, figures = decide(findings, self.settings, self.match_threshold, today)
        report = {
            "decision": decision,
            "reasons": reasons,
            "face": {"match_score": round(obs.face_match_score, 4),
                     "match_threshold": self.match_threshold,
                     "document_face_found": obs.document_face_found,
                     "selfie_face_found": obs.selfie_face_found,
                     "selfie_faces": obs.selfie_faces, "quality": item["quality"]},
            "liveness": {k: (round(v, 4) if isinstance(v, float) else v)
                         for k, v in asdict(liveness).items()},
            "document": {**obs.document, "age": figures["age"],
                         "visual_zone_consistent": figures["visual_zone_consistent"]},
            "fraud_score": round(fraud, 4),
            # what antifraud saw, in its pinned order (explains fraud_score)
            "fraud_features": {name: round(float(v), 4)
                               for name, v in zip(FEATURES, item["features"], strict=True)},
            "policy": {k: figures[k] for k in ("min_age", "fraud_review_threshold",
                                               "fraud_reject_threshold")},
            "application": item["application"],
            "models": self._models,
        }
        if self.signer is not None:
            report["signature"] = self.signer.sign(self._signed(item, decision, reasons))
        return {
            "DECISION": np.array([[decision.encode()]], dtype=np.object_),
            "FACE_MATCH_SCORE": np.array([[obs.face_match_score]], dtype=np.float32),
            "LIVENESS_SCORE": np.array([[liveness.score if liveness.valid else -1.0]],
                                       dtype=np.float32),
            "FRAUD_SCORE": np.array([[fraud]], dtype=np.float32),
            "REPORT": np.array([[json.dumps(report).encode()]], dtype=np.object_),
        }
