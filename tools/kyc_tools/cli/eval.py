"""``kyc eval``: the quality of each model version on labelled data, side by side, through
a private Triton server over the repository (kyc_tools.dev.eval).

  kyc eval faces DIR         DIR/<person>/<image>: FNMR, FMR, EER, threshold for a target
                             FMR, DET plot; versions of face_embedding
  kyc eval documents DIR     images with a .json each ({"mrz": [...], "fields": {...}}):
                             MRZ read and exact rates, per-field accuracy, time per
                             document; versions of ocr_rec (or --model mrz_rec, ocr_det)
  kyc eval liveness DIR      DIR/<sample>/ frames and label.json: APCER per attack type,
                             BPCER; versions of liveness_sequence
  kyc eval antifraud F.csv   the feature columns and label: ROC AUC, score distribution;
                             versions of antifraud
  kyc eval pose              renders of known angles: the degrees the liveness head pose
                             reads, and the knots that calibrate it
  kyc eval samples --out D   the labelled data this project may use, in those formats

Every version on disk is measured unless --versions names some (one not yet serving
too). Nothing is changed: the report's recommendation names the config line to change.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kyc_tools.cli.repo import DEFAULT_REPOSITORY
from kyc_tools.dev.eval import DOCUMENT_MODELS, MEASURED


def _versions(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"versions are numbers, as 1,2: not {text!r}") from None


def add_eval_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("eval", help="measure model versions on labelled data",
                            description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = parser.add_subparsers(dest="eval_kind", required=True)

    def common(p: argparse.ArgumentParser, model: str) -> None:
        p.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY,
                       help=f"the model repository (default {DEFAULT_REPOSITORY})")
        p.add_argument("--versions", type=_versions, default=None,
                       help=f"versions of {model} to compare, as 1,2 (default: every one "
                            "on disk)")
        p.add_argument("--candidate", type=Path, action="append", default=[], metavar="PATH",
                       help=f"a version of {model} not yet in the repository (its folder, "
                            "or its model file), measured as the next version beside those "
                            "on disk; again for more, in order; the repository is not "
                            "changed")
        p.add_argument("--json", type=Path, default=None, help="write the figures as JSON")
        p.add_argument("--report", type=Path, default=None,
                       help="write a Markdown report, its PNG plots beside it")
        p.set_defaults(func=cmd_eval)

    faces = kinds.add_parser("faces", help="face match: FNMR, FMR, EER, DET")
    faces.add_argument("data", type=Path, help="DIR/<person>/<image>")
    faces.add_argument("--fmr", type=float, default=1e-4,
                       help="the target false match rate for the threshold (default 1e-4)")
    common(faces, MEASURED["faces"])

    documents = kinds.add_parser("documents", help="document reading: MRZ and fields")
    documents.add_argument("data", type=Path, help="DIR/<name>.jpg with DIR/<name>.json")
    documents.add_argument("--model", choices=DOCUMENT_MODELS, default=DOCUMENT_MODELS[0],
                           help="the OCR model whose versions are compared")
    documents.add_argument("--peer", action="append", choices=("rapidocr",), default=[],
                           help="also read the pages with this open peer, in process")
    common(documents, "the --model")

    liveness = kinds.add_parser("liveness", help="presentation attacks: APCER, BPCER")
    liveness.add_argument("data", type=Path, help="DIR/<sample>/ with frames and label.json")
    liveness.add_argument("--before", type=Path, default=None, metavar="JSON",
                          help="the --json of a run of the code before a change on the same "
                               "sequences: shown beside, as 'before'")
    common(liveness, MEASURED["liveness"])

    pose = kinds.add_parser("pose", help="head pose: degrees read for known angles")
    pose.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY,
                      help="finds the faces and reads their landmarks (in process)")
    pose.add_argument("--json", type=Path, default=None, help="write the figures as JSON")
    pose.set_defaults(func=cmd_pose)

    antifraud = kinds.add_parser("antifraud", help="fraud scores: ROC AUC, distribution")
    antifraud.add_argument("data", type=Path, help="a CSV of the feature columns and label")
    common(antifraud, MEASURED["antifraud"])

    samples = kinds.add_parser("samples", help="write the labelled data this project may use")
    samples.add_argument("--out", type=Path, required=True)
    samples.add_argument("--documents", type=int, default=16, help="documents to render")
    samples.add_argument("--documents-seed", type=int, default=None, metavar="S",
                         help="render documents/ from seed S and documents-harsh/ from "
                              "S + --documents (default: the fixed seeds 7000 and 50000); "
                              "pages from seed 900000 on are held out: read them once, at "
                              "the end (docs/eval/README.md)")
    samples.add_argument("--repository", type=Path, default=DEFAULT_REPOSITORY,
                         help="finds the faces the liveness renderer turns (in process)")
    samples.set_defaults(func=cmd_samples)


def cmd_eval(args: argparse.Namespace) -> int:
    from kyc_tools.dev.eval import antifraud, documents, faces, liveness
    from kyc_tools.dev.eval.report import public, write_json, write_report
    from kyc_tools.dev.eval.server import EvalError, versions_on_disk, with_candidate

    model = args.model if args.eval_kind == "documents" else MEASURED[args.eval_kind]
    try:
        with with_candidate(args.repository, model, args.candidate) as repository:
            if args.eval_kind == "faces":
                served = max(versions_on_disk(args.repository, model), default=None)
                result = faces.run(args.data, repository, args.versions, args.fmr, served)
            elif args.eval_kind == "documents":
                result = documents.run(args.data, repository, args.model, args.versions,
                                       args.peer)
            elif args.eval_kind == "liveness":
                result = liveness.run(args.data, repository, args.versions, args.before)
            else:
                result = antifraud.run(args.data, repository, args.versions)
        result["repository"] = str(args.repository)
        if args.candidate:
            first = max(versions_on_disk(args.repository, model), default=0) + 1
            result["candidates"] = {str(first + k): str(c) for k, c in enumerate(args.candidate)}
    except EvalError as exc:
        print(f"kyc eval {args.eval_kind}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        write_json(result, args.json)
    written = write_report(result, args.report) if args.report else []
    print(json.dumps({v: summary(result["kind"], f) for v, f in public(result)["versions"].items()},
                     indent=1))
    print(f"recommendation: {result['recommendation']}")
    for path in ([args.json] if args.json else []) + written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


SUMMARY = {
    "faces": ("genuine_pairs", "impostor_pairs", "threshold", "fnmr", "fmr",
              "threshold_at_target_fmr", "fnmr_at_target_fmr", "threshold_at_fmr_bound",
              "fnmr_at_fmr_bound", "review_threshold", "genuine_in_band",
              "impostor_in_band", "eer"),
    "documents": ("documents", "mrz_read_rate", "mrz_exact_rate", "field_accuracy",
                  "documents_with_check_failures", "seconds_per_document_p50"),
    "liveness": ("bona_fide", "bpcer", "attacks", "apcer_max"),
    "antifraud": ("cases", "roc_auc"),
}


def summary(kind: str, figures: dict) -> dict:
    """The headline figures of one version, printed on stdout."""
    out = {k: figures[k] for k in SUMMARY[kind] if k in figures}
    if kind == "liveness":
        out["apcer_by_type"] = {t: a["apcer"] for t, a in figures["apcer_by_type"].items()}
    return out


def cmd_pose(args: argparse.Namespace) -> int:
    """The knots fitted on every render of known angle, and the degrees read: through
    the shipped knots, through knots fitted on the other people's, between the knots."""
    from kyc_tools.dev.eval import pose

    known = pose.measure(args.repository)
    between = pose.measure(args.repository, angles=pose.BETWEEN)
    result = {"knots": pose.fit(known), "shipped": pose.table(pose.shipped(known)),
              "held_out": pose.table(pose.held_out(known)),
              "between": pose.table(pose.shipped(between)), "within_deg": pose.WITHIN_DEG}
    for name in ("shipped", "held_out", "between"):
        print(f"{name}: measure, angle, renders, fit reading, degrees read, error "
              "(mean, p90 of |error|)")
        for row in result[name]:
            print("  " + ", ".join(str(v) for v in row.values()))
    print("knots (kyc.face.landmarks.POSE_KNOTS): " + json.dumps(result["knots"]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


def cmd_samples(args: argparse.Namespace) -> int:
    from kyc_tools.dev.eval.samples import write_samples

    counts = write_samples(args.out, args.repository, args.documents,
                           documents_seed=args.documents_seed)
    for kind, n in counts.items():
        print(f"{args.out / kind}: {n}")
    print("antifraud cases: kyc models antifraud cases --out "
          f"{args.out / 'antifraud.csv'}")
    return 0
