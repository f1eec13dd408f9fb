"""A ``kyc eval`` result as JSON, Markdown and PNG plots (matplotlib, the ``bench`` extra).

The Markdown compares the versions side by side and ends each section with the
recommendation line; it changes nothing, it names the config line to change.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kyc_tools.dev.eval import metrics
from kyc_tools.dev.eval.metrics import percent

log = logging.getLogger(__name__)


def public(value: Any) -> Any:
    """``value`` without its private keys (``_scores``...: arrays for the plots), numpy
    numbers as Python's."""
    if isinstance(value, Mapping):
        return {k: public(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, (list, tuple)):
        return [public(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def write_json(result: Mapping[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(public(result), indent=2) + "\n")
    return path


# -- plots ------------------------------------------------------------------------------
def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def write_plots(result: Mapping[str, Any], out: Path, stem: str) -> list[Path]:
    """The result's plots as ``out/<stem>-*.png``; none without matplotlib."""
    plt = _pyplot()
    if plt is None:
        log.warning("matplotlib is not installed (the bench extra): no plots")
        return []
    out.mkdir(parents=True, exist_ok=True)
    kind, versions = result["kind"], result["versions"]
    written = []
    if kind == "faces":
        fig, ax = plt.subplots(figsize=(6, 5))
        for version, v in versions.items():
            _, fmr, fnmr = metrics.det_curve(v["_genuine"], v["_impostor"])
            floor = 0.5 / max(v["impostor_pairs"], 1), 0.5 / max(v["genuine_pairs"], 1)
            ax.step(np.maximum(fmr, floor[0]), np.maximum(fnmr, floor[1]), where="post",
                    label=f"version {version} (EER {percent(v['eer'])})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("FMR (impostor pairs accepted)")
        ax.set_ylabel("FNMR (genuine pairs rejected)")
        ax.set_title(f"DET: {result['model']}, {result['images']} images")
        ax.axvline(next(iter(versions.values()))["target_fmr"], color="grey", ls=":",
                   label="target FMR")
        ax.legend(fontsize=8)
        written.append(_save(fig, out / f"{stem}-det.png", plt))
        fig, ax = plt.subplots(figsize=(6, 4))
        for version, v in versions.items():
            ax.hist(v["_genuine"], bins=20, alpha=0.5, label=f"v{version} genuine")
            ax.hist(v["_impostor"], bins=20, alpha=0.5, label=f"v{version} impostor")
        ax.axvline(next(iter(versions.values()))["threshold"], color="black", ls="--",
                   label="configured threshold")
        ax.set_xlabel("cosine score")
        ax.set_ylabel("pairs")
        ax.legend(fontsize=8)
        written.append(_save(fig, out / f"{stem}-scores.png", plt))
    elif kind == "antifraud":
        from sklearn.metrics import roc_curve

        fig, ax = plt.subplots(figsize=(5, 5))
        for version, v in versions.items():
            if v["roc_auc"] is None:
                continue
            fpr, tpr, _ = roc_curve(v["_labels"], v["_scores"])
            ax.plot(fpr, tpr, label=f"version {version} (AUC {v['roc_auc']:.3f})")
        ax.plot([0, 1], [0, 1], color="grey", ls=":")
        ax.set_xlabel("genuine cases flagged")
        ax.set_ylabel("fraud cases flagged")
        ax.legend(fontsize=8)
        written.append(_save(fig, out / f"{stem}-roc.png", plt))
        fig, ax = plt.subplots(figsize=(6, 4))
        for version, v in versions.items():
            for value, name in ((0, "genuine"), (1, "fraud")):
                ax.hist(v["_scores"][v["_labels"] == value], bins=40, range=(0, 1), alpha=0.5,
                        label=f"v{version} {name}")
        for name, t in next(iter(versions.values()))["thresholds"].items():
            ax.axvline(t, color="black", ls="--", lw=0.8)
            ax.text(t, ax.get_ylim()[1] * 0.9, name.replace("fraud_", "").replace(
                "_threshold", ""), rotation=90, fontsize=7)
        ax.set_yscale("log")
        ax.set_xlabel("FRAUD_SCORE")
        ax.set_ylabel("cases")
        ax.legend(fontsize=8)
        written.append(_save(fig, out / f"{stem}-scores.png", plt))
    elif kind == "liveness":
        types = sorted({t for v in versions.values() for t in v["apcer_by_type"]})
        series = {f"version {version}": [v["apcer_by_type"].get(t, {}).get("apcer", 0.0)
                                         for t in types] + [v["bpcer"] or 0.0]
                  for version, v in versions.items()}
        fig = _bars(plt, [f"APCER\n{t}" for t in types] + ["BPCER"], series, "share", 1.0)
        written.append(_save(fig, out / f"{stem}-pad.png", plt))
    elif kind == "documents":
        names = sorted({n for v in versions.values() for n in v["field_accuracy_by_name"]})
        series = {f"{result['model']} v{version}": [v["field_accuracy_by_name"].get(n, 0.0)
                                                    for n in names]
                  for version, v in versions.items()}
        fig = _bars(plt, names, series, "read exactly", 1.05)
        written.append(_save(fig, out / f"{stem}-fields.png", plt))
    return written


def _liveness_lines(result: dict, versions: dict, names: list[str]) -> list[str]:
    """The liveness part of a report: what was played, APCER per species (presentation
    first, injection apart), BPCER, the reasons."""
    out = [f"{result['sequences']} sequences: "
           + ", ".join(f"{k} {n}" for k, n in sorted(result["labels"].items()))
           + f"; challenges played: {len(result['challenges'])} different.", ""]
    sources = result.get("bona_fide_sources") or {}
    if sources:
        out += [f"Bona fide sessions cut from real video of {result.get('people', '?')} "
                "people: " + ", ".join(f"{clip} {n}" for clip, n in sorted(sources.items()))
                + " (windows of each clip as filmed, mirrored and reversed: not independent "
                "sessions).", ""]
    if result.get("before"):
        out += [f"`before`: the run of `{result['before']}` (the code before a change, on the "
                "same sequences), recounted here from the sequences it got wrong.", ""]
    replay = result.get("fixed_recording")
    if replay:
        out += [f"A recording of fixed moves played to each of the {replay['challenges']} "
                f"challenges the server draws passes {replay['passed_at_best']} of them at "
                f"best ({', '.join(replay['recording'])}).", ""]
    species = result.get("species") or {}
    if species:
        out += [*_table(["attack type", "channel", "what"],
                        [[f"`{t}`", note["channel"], note["what"]]
                         for t, note in sorted(species.items(),
                                               key=lambda i: (i[1]["channel"], i[0]))]), ""]
    out += [f"Passive anti-spoofing: {result['passive_pad']}.", ""]
    types = sorted({t for v in versions.values() for t in v["apcer_by_type"]},
                   key=lambda t: (species.get(t, {}).get("channel", "presentation"), t))
    rows = [["BPCER (bona fide rejected)"] + [
        f"{percent(v['bpcer'])} ({v['bona_fide_rejected']}/{v['bona_fide']})"
        for v in versions.values()]]
    for t in types:
        channel = species.get(t, {}).get("channel", "presentation")
        rows.append([f"APCER `{t}`" + (" (injection)" if channel == "injection" else "")] + [
            (f"{percent(v['apcer_by_type'][t]['apcer'])} "
             f"({v['apcer_by_type'][t]['accepted']}/{v['apcer_by_type'][t]['presentations']})"
             if t in v["apcer_by_type"] else "-") for v in versions.values()])
    for key, what in (("bona_fide_by_person", "person"), ("bona_fide_by_kind", "")):
        for name in sorted({n for v in versions.values() for n in v.get(key, {})}):
            rows.append([f"bona fide refused, {what + ' ' if what else ''}{name}"] + [
                (f"{v[key][name]['refused']}/{v[key][name]['sessions']}"
                 if name in v.get(key, {}) else "-") for v in versions.values()])
    rows.append(["APCER, worst presentation attack"]
                + [percent(v["apcer_max"]) for v in versions.values()])
    if any(v.get("apcer_injection_max") is not None for v in versions.values()):
        rows.append(["APCER, injection (not a presentation attack)"]
                    + [percent(v.get("apcer_injection_max")) for v in versions.values()])
    out += [*_table(["", *names], rows), ""]
    for version, v in versions.items():
        for label, reasons in v["reasons_by_label"].items():
            out.append(f"- {version if version == 'before' else 'version ' + version}, "
                       f"`{label}`: "
                       + ", ".join(f"{r} {n}" for r, n in reasons.items()))
        for failed in v.get("errors", []):
            out.append(f"- version {version}, `{failed['sequence']}` failed: "
                       f"{failed['error']}")
    return [*out, ""]


def _bars(plt, labels: list[str], series: dict[str, list[float]], ylabel: str, top: float):
    """One group of bars per label, one bar per series (version) in each."""
    fig, ax = plt.subplots(figsize=(max(6, len(labels) * 0.8), 4))
    width = 0.8 / max(len(series), 1)
    for k, (name, values) in enumerate(series.items()):
        ax.bar(np.arange(len(labels)) + k * width, values, width, label=name)
    ax.set_xticks(np.arange(len(labels)) + width * (len(series) - 1) / 2)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylim(0, top)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    return fig


def _save(fig, path: Path, plt) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- Markdown ---------------------------------------------------------------------------
def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def _num(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _faces_lines(result: Mapping[str, Any], versions: dict, names: list[str]) -> list[str]:
    """The faces part of a report: the pairs, the error rates at the configured and the
    target threshold, the faces not found and the pairs that fail."""
    first = next(iter(versions.values()))
    out = [f"{result['images']} images of {result['people']} people, faces found in "
           f"{result['faces_found']}; {first['genuine_pairs']} genuine and "
           f"{first['impostor_pairs']} impostor pairs (FMR measurable down to "
           f"{first['fmr_resolution']:.1e}).", ""]
    rows = [
        ["embedding dims"] + [v["embedding_dims"] for v in versions.values()],
        [f"FNMR at the configured threshold {first['threshold']:g}"]
        + [percent(v["fnmr"]) for v in versions.values()],
        ["FMR at the configured threshold"] + [percent(v["fmr"]) for v in versions.values()],
        [f"threshold for FMR <= {first['target_fmr']:g}"]
        + [_num(v["threshold_at_target_fmr"]) for v in versions.values()],
        ["FNMR there"] + [percent(v["fnmr_at_target_fmr"]) for v in versions.values()],
        [f"threshold the data shows FMR <= {first['target_fmr']:g} at (95% confidence)"]
        + [_num(v["threshold_at_fmr_bound"]) for v in versions.values()],
        ["FNMR there"] + [percent(v["fnmr_at_fmr_bound"]) for v in versions.values()],
        [f"review band from {first['review_threshold']:g}: genuine pairs it saves from a "
         "reject"] + [percent(v["genuine_in_band"]) for v in versions.values()],
        ["impostor pairs it sends to a person"]
        + [percent(v["impostor_in_band"]) for v in versions.values()],
        ["FNMR below the band (rejected)"]
        + [percent(v["fnmr_below_review"]) for v in versions.values()],
        [f"threshold for FMR <= {first['review_fmr']:g} (the band's edge to propose)"]
        + [_num(v["threshold_at_review_fmr"]) for v in versions.values()],
        ["EER (threshold)"] + [f"{percent(v['eer'])} ({_num(v['eer_threshold'])})"
                               for v in versions.values()],
        ["lowest genuine / highest impostor score"]
        + [f"{_num(v['genuine_score_min'])} / {_num(v['impostor_score_max'])}"
           for v in versions.values()],
        ["embedding time (s)"] + [v["embed_s"] for v in versions.values()],
    ]
    out += [*_table(["", *names], rows), ""]
    if result["not_found"]:
        out += ["Faces not found: " + ", ".join(f"`{n['image']}` ({n['why']})"
                                                for n in result["not_found"]), ""]
    for version, v in versions.items():
        bad = v["failing_pairs"]
        for what, label in (("genuine_rejected", "genuine pairs rejected"),
                            ("impostor_accepted", "impostor pairs accepted")):
            if bad[what]:
                out.append(f"- version {version}, {label} at {v['failing_at']:.3f}: "
                           + ", ".join(f"`{p['a']}` ~ `{p['b']}` {p['score']:.3f}"
                                       for p in bad[what]))
    return [*out, ""]


def _documents_lines(result: Mapping[str, Any], versions: dict, names: list[str]) -> list[str]:
    """The documents part of a report: one column per version and per peer reader."""
    columns = {**{f"{result['model']} v{v}": f for v, f in versions.items()},
               **{f"{p} (peer)": f for p, f in result.get("peers", {}).items()}}
    keys = [("MRZ read", "mrz_read_rate"), ("MRZ lines exact", "mrz_exact_rate"),
            ("every field exact", "fields_exact_rate"), ("fields exact", "field_accuracy"),
            ("MRZ valid", "valid_rate")]
    rows = [[label] + [percent(v[key]) for v in columns.values()] for label, key in keys]
    rows.append(["documents with a check digit failing"]
                + [v["documents_with_check_failures"] for v in columns.values()])
    rows.append(["reported valid but wrong"]
                + [v.get("valid_but_wrong", 0) for v in columns.values()])
    if any(v.get("tampered") for v in columns.values()):
        rows.append(["tampered pages reported not valid"] + [
            f"{v['tampered_flagged']} of {v['tampered']}" for v in columns.values()])
    for label, key in (("genuine pages reported not valid", "genuine_not_valid"),
                       ("of them, another photo asked for (`misread` named)",
                        "genuine_not_valid_retake"),
                       ("genuine pages rejected for a misread (must be 0)",
                        "genuine_rejected_for_misread")):
        rows.append([label] + [v.get(key, "-") for v in columns.values()])
    rows.append(["s per document, p50 / p95"] + [
        f"{v['seconds_per_document_p50']} / {v['seconds_per_document_p95']}"
        for v in columns.values()])
    rows.append(["errors"] + [len(v["errors"]) for v in columns.values()])
    fields = sorted({n for v in columns.values() for n in v["field_accuracy_by_name"]})
    rows += [[f"field `{n}`"] + [percent(v["field_accuracy_by_name"].get(n))
                                 for v in columns.values()] for n in fields]
    kinds = ", ".join(f"{k} {n}" for k, n in result["kinds"].items())
    return [f"{result['documents']} documents ({kinds}), each through `document_ocr` "
            "alone (an idle server).", "", *_table(["", *columns], rows), "",
            *_documents_by_kind(columns)]


def _documents_by_kind(columns: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The table "By kind of page": one row per kind of page met (a page is in several),
    one column per version and peer, each cell the counts of that kind."""
    from kyc_tools.dev.eval.document_cases import CATEGORIES

    met = [k for k in CATEGORIES
           if any(k in (v.get("by_kind_of_page") or {}) for v in columns.values())]
    if not met:
        return []

    def cell(counts: Mapping[str, int] | None) -> str:
        if not counts:
            return "-"
        return (f"{counts['mrz_found']} / {counts['mrz_exact']} / {counts['fields_exact']} / "
                f"{counts['valid_but_wrong']} / {counts['genuine_not_valid']} "
                f"({counts['genuine_rejected_for_misread']})")

    rows = []
    for kind in met:
        per_column = [(v.get("by_kind_of_page") or {}).get(kind) for v in columns.values()]
        documents = max((c["documents"] for c in per_column if c), default=0)
        rows.append([CATEGORIES[kind], documents] + [cell(c) for c in per_column])
    return ["### By kind of page", "",
            "Each kind of page is read from what is printed on it; a page counts in every "
            "kind it is. Each cell: MRZ read / MRZ lines exact / every field exact / "
            "reported valid but wrong / genuine pages reported not valid (of them rejected "
            "for a misread, which must be 0).", "",
            *_table(["kind of page", "documents", *columns], rows), ""]


def _antifraud_lines(result: Mapping[str, Any], versions: dict, names: list[str]) -> list[str]:
    """The antifraud part of a report: ROC AUC, the score quantiles and the share of each
    label at or above each threshold, the median score by kind."""
    first = next(iter(versions.values()))
    out = [f"{result['cases']} cases, {result['fraud_cases']} of them fraud; thresholds "
           f"from `{result['thresholds_from']}`: "
           + ", ".join(f"{k} {t:g}" for k, t in first["thresholds"].items()) + ".", ""]
    rows = [["ROC AUC"] + [_num(v["roc_auc"], 4) for v in versions.values()]]
    for label in ("genuine", "fraud"):
        rows.append([f"{label}: score median (5%-95%)"] + [
            "{} ({}-{})".format(*(v[label]["quantiles"].get(q, "-")
                                  for q in ("0.5", "0.05", "0.95")))
            for v in versions.values()])
        for name in first["thresholds"]:
            rows.append([f"{label}: at or above {name}"] + [
                percent(v[label]["at_or_above"][name]) for v in versions.values()])
    out += [*_table(["", *names], rows), ""]
    if "by_kind" in first:
        kinds = sorted(first["by_kind"])
        out += [*_table(["kind", *[f"v{v} median score" for v in versions]],
                        [[k] + [v["by_kind"][k]["score_median"] for v in versions.values()]
                         for k in kinds]), ""]
    return out


# The part of a report that each kind of result has (after the header, before the plots).
_SECTIONS = {"faces": _faces_lines, "documents": _documents_lines,
             "liveness": _liveness_lines, "antifraud": _antifraud_lines}


def markdown(result: Mapping[str, Any], plots: list[Path], where: Path) -> str:
    """The report of one result; ``plots`` linked relative to ``where`` (its folder)."""
    kind, versions = result["kind"], result["versions"]
    out = [f"# kyc eval {kind}", "",
           f"Data: `{result['data']}`. Repository: `{result['repository']}`. "
           f"Model compared: `{result['model']}`, versions {', '.join(versions)}.", ""]
    out += [f"Version {v} is a candidate, not in the repository: `{Path(path).name}`."
            for v, path in result.get("candidates", {}).items()] + (
        [""] if result.get("candidates") else [])
    if kind in _SECTIONS:
        out += _SECTIONS[kind](result, versions, [v if v == "before" else f"version {v}"
                                                  for v in versions])
    for plot in plots:
        link = plot.relative_to(where) if plot.is_relative_to(where) else plot
        out.append(f"![{plot.stem}]({link})")
    out += ["", f"**Recommendation:** {result['recommendation']}.", "",
            "_This report changes nothing: the line above names the version and the config "
            "line to change._", ""]
    return "\n".join(out)


def write_report(result: Mapping[str, Any], path: Path) -> list[Path]:
    """``path`` (Markdown) and its plots beside it; returns every file written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    plots = write_plots(result, path.parent, path.stem)
    path.write_text(markdown(result, plots, path.parent))
    return [path, *plots]
