"""``kyc eval liveness``: APCER per attack type and BPCER of the served liveness verdict
(ISO/IEC 30107-3), per version of ``liveness_sequence``.

Each labelled sequence is played to ``liveness_sequence`` as a camera would send it
(START, its frames at its own frame rate, END; :func:`kyc_client.liveness.run_session`),
and the verdict's ``is_live`` is its outcome. A recording cannot follow a challenge
drawn at random, so each sequence's START names the challenge it was recorded for, to
a model loaded with ``challenge`` "from_request" (set only in this private server; a
served repository that sets ``challenge`` is refused by ``kyc repo check``).

What the verdict rests on is said in the report: the active challenge (head moves,
one person, sharpness, duration), the relief check (the head turns must show a solid
face) and, only when one is configured, a passive anti-spoofing model. None is
shipped: no credible pretrained weights exist on a package registry (docs/liveness.md).
Attack types are presentation attacks (media shown to a camera,
ISO/IEC 30107-3: the worst APCER is theirs) or injection (frames made by software,
reported apart: what no server-side check of pixels can tell from a camera).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kyc_tools.dev.eval import MEASURED, metrics
from kyc_tools.dev.eval.calls import each, error_text
from kyc_tools.dev.eval.data import LivenessSample, read_liveness
from kyc_tools.dev.eval.server import EvalError, EvalServer, pick_versions
from kyc_tools.repo.config import model_parameters

log = logging.getLogger(__name__)

MODEL = MEASURED["liveness"]
SESSIONS_IN_FLIGHT = 8
NO_PAD = ("no passive anti-spoofing model is installed (antispoof_model is empty; no "
          "credible pretrained weights exist on a package registry): the verdict rests on the "
          "active challenge and the relief check, so what has a face's relief and makes the "
          "moves (a 3-D mask, a replay of the person's recorded head turns, frames made by "
          "software) can pass")


def play(url: str, sample: LivenessSample) -> dict[str, Any]:
    """One session of ``sample``: its verdict, reasons, or its error."""
    from kyc_client.liveness import run_session

    frames = [p.read_bytes() for p in sample.frames]
    replies = run_session(url, lambda challenge: frames, fps=sample.fps,
                          parameters={"kyc_challenge": ",".join(sample.challenge)})
    final = replies[-1]
    if isinstance(final, Exception):
        return {"live": False, "error": error_text(final)}
    status = final.status
    return {"live": bool(final.is_live), "score": final.score,
            "reasons": list(status.get("reasons") or []),
            "passive_pad": status.get("passive_pad")}


def verdicts(samples: Sequence[LivenessSample], outcomes: dict[str, dict[str, Any]]
             ) -> dict[str, Any]:
    """APCER/BPCER of the sessions' outcomes, the bona fide ones refused per person and
    per kind, the reasons per label, the wrong ones."""
    injection = sorted({s.label for s in samples if s.channel == "injection"})
    figures = metrics.pad_figures([(s.label, outcomes[s.name]["live"]) for s in samples],
                                  injection)
    why: dict[str, Counter[str]] = {}
    for sample in samples:
        outcome = outcomes[sample.name]
        reasons = outcome.get("reasons") or (["error"] if "error" in outcome else [])
        if not sample.bona_fide or not outcome["live"]:
            why.setdefault(sample.label, Counter()).update(reasons or ["live"])
    figures["reasons_by_label"] = {k: dict(v.most_common()) for k, v in why.items()}
    bona = [s for s in samples if s.bona_fide]
    figures["bona_fide_by_person"] = _refused(bona, outcomes, lambda s: [s.person or "?"])
    figures["bona_fide_by_kind"] = _refused(bona, outcomes, lambda s: s.kinds)
    figures["wrong"] = [{"sequence": s.name, "label": s.label, "live": outcomes[s.name]["live"],
                         **{k: outcomes[s.name][k] for k in ("reasons", "error")
                            if outcomes[s.name].get(k)}}
                        for s in samples if outcomes[s.name]["live"] != s.bona_fide]
    # a session that failed is not an attack stopped: what failed is said
    figures["errors"] = [{"sequence": s.name, "label": s.label,
                          "error": outcomes[s.name]["error"]}
                         for s in samples if outcomes[s.name].get("error")]
    return figures


def _refused(samples: Sequence[LivenessSample], outcomes: dict[str, dict[str, Any]],
             keys: Callable[[LivenessSample], Sequence[str]]) -> dict[str, dict[str, int]]:
    """Sessions and sessions refused under each key of ``keys(sample)``."""
    out: dict[str, dict[str, int]] = {}
    for sample in samples:
        for key in keys(sample):
            row = out.setdefault(key, {"sessions": 0, "refused": 0})
            row["sessions"] += 1
            row["refused"] += not outcomes[sample.name]["live"]
    return dict(sorted(out.items()))


def before(path: Path, samples: Sequence[LivenessSample]) -> dict[str, Any]:
    """The figures of an earlier run on the same sequences (its ``--json``: the code
    before a change, served from its own checkout), recounted as this run counts them
    from the sequences it got wrong."""
    import json

    try:
        earlier = json.loads(path.read_text())
        (figures,) = earlier["versions"].values()
        wrong = {w["sequence"] for w in figures["wrong"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EvalError(f"{path}: not the --json of one version's kyc eval liveness "
                        f"({exc})") from None
    if earlier.get("sequences") != len(samples) or not wrong <= {s.name for s in samples}:
        raise EvalError(f"{path}: was run on other sequences ({earlier.get('sequences')}, "
                        f"not these {len(samples)})")
    outcomes = {s.name: {"live": s.bona_fide != (s.name in wrong)} for s in samples}
    recounted = verdicts(samples, outcomes)
    recounted["reasons_by_label"] = figures.get("reasons_by_label", {})
    return recounted


def fixed_recording(moves: Sequence[str], length: int, min_turns: int,
                    forgiven: int) -> dict[str, Any]:
    """What a recording of fixed moves gets against every challenge the server draws,
    ``forgiven`` natural moves forgiven on the way: the most challenges one recording
    passes, and which. Recordings up to ``length + 2 * forgiven`` moves (more than
    the challenge and each forgiven move can use) are tried."""
    import itertools

    from kyc.liveness.challenge import possible_challenges, progress

    every = possible_challenges(moves, length, min_turns)
    best, recording = 0, ()
    for n in range(1, length + 2 * forgiven + 1):
        for moves_played in itertools.product(dict.fromkeys(moves), repeat=n):
            passed = sum(progress(moves_played, c, forgiven) == length for c in every)
            if passed > best:
                best, recording = passed, moves_played
    return {"challenges": len(every), "passed_at_best": best, "recording": list(recording),
            "forgiven_moves": forgiven}


def run(root: Path, repository: Path, versions: Sequence[int] | None = None,
        earlier: Path | None = None) -> dict[str, Any]:
    """The figures of ``kyc eval liveness`` per version (and ``earlier``'s, the figures
    of a run of the code before, as "before")."""
    samples = read_liveness(root)
    versions = pick_versions(repository, MODEL, versions)
    challenges = sorted({s.challenge for s in samples})
    result: dict[str, Any] = {
        "kind": "liveness", "data": str(root), "repository": str(repository), "model": MODEL,
        "sequences": len(samples), "labels": dict(Counter(s.label for s in samples)),
        "challenges": [",".join(c) for c in challenges], "versions": {},
        "species": species_notes(samples),
        "bona_fide_sources": dict(Counter(s.source.split(" ")[0] for s in samples
                                          if s.bona_fide and s.source)),
        "people": len({s.person for s in samples if s.bona_fide and s.person}),
    }
    if earlier is not None:
        result["versions"]["before"] = before(earlier, samples)
        result["before"] = str(earlier)
    parameters = model_parameters(repository, MODEL)
    pad_model = parameters.get("antispoof_model", "")
    result["passive_pad"] = f"configured: {pad_model}" if pad_model else NO_PAD
    served_moves = [m.strip() for m in parameters.get("moves", "left,right").split(",")]
    # The moves the sessions look for must include every challenge's; each START names
    # its own challenge (the private server's setting "from_request").
    moves = served_moves + sorted({m for c in challenges for m in c} - set(served_moves))
    result["fixed_recording"] = fixed_recording(
        served_moves, int(parameters.get("challenge_length", 3)),
        int(parameters.get("min_turns", 2)), int(parameters.get("forgiven_moves", 0)))
    fixed = {"challenge": "from_request", "moves": ",".join(moves)}
    for version in versions:
        outcomes: dict[str, dict[str, Any]] = {}
        with EvalServer(repository, [MODEL], MODEL, version, fixed) as server:
            played = each(lambda s, url=server.grpc_url: play(url, s), samples,
                          f"sequences v{version}", in_flight=SESSIONS_IN_FLIGHT)
        for sample, outcome in zip(samples, played, strict=True):
            outcomes[sample.name] = (outcome if not isinstance(outcome, Exception)
                                     else {"live": False, "error": error_text(outcome)})
        result["versions"][str(version)] = figures = verdicts(samples, outcomes)
        log.info("liveness: version %d: BPCER %s, APCER (worst type) %s", version,
                 metrics.percent(figures["bpcer"]), metrics.percent(figures["apcer_max"]))
    result["recommendation"] = recommend(result)
    return result


def species_notes(samples: Sequence[LivenessSample]) -> dict[str, dict[str, str]]:
    """Each attack type's channel and, for this project's species, what it is."""
    from kyc_tools.dev.eval.attacks import SPECIES

    notes = {}
    for sample in samples:
        if not sample.bona_fide and sample.label not in notes:
            known = SPECIES.get(sample.label)
            notes[sample.label] = {"channel": sample.channel,
                                   "what": known.what if known else ""}
    return notes


def recommend(result: dict[str, Any]) -> str:
    """The version with the lowest worst-type APCER, then BPCER."""
    ranked = sorted(((v, f) for v, f in result["versions"].items() if v != "before"),
                    key=lambda i: (i[1]["apcer_max"] if i[1]["apcer_max"] is not None else 1.0,
                                   i[1]["bpcer"] if i[1]["bpcer"] is not None else 1.0,
                                   -int(i[0])))
    best, f = ranked[0]
    line = (f"{MODEL} version {best}: APCER (worst presentation attack type) "
            f"{metrics.percent(f['apcer_max'])}"
            f", BPCER {metrics.percent(f['bpcer'])}")
    if len(ranked) > 1:
        line += " (" + "; ".join(f"version {v}: {metrics.percent(g['apcer_max'])}, "
                                 f"{metrics.percent(g['bpcer'])}" for v, g in ranked[1:]) + ")"
    if not result["passive_pad"].startswith("configured"):
        line += ". No passive anti-spoofing model is installed"
    return line
