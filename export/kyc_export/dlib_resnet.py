"""dlib's face recognition ResNet (``dlib_face_recognition_resnet_model_v1.dat``) -> ONNX.

:func:`read_dat` parses dlib's own serialization of the network of
``dnn_face_recognition_ex.cpp`` (:data:`RESNET_V1`) into numpy weights, checking every
layer's name, version and geometry against that definition; :func:`convert_dlib_resnet`
builds the ONNX graph from them with ``onnx.helper`` (no torch), with the served contract
of ``face_embedding`` baked in: ``FACE`` uint8 ``[N,112,112,3]`` RGB, an ArcFace-aligned
crop, resampled into dlib's 150x150 face chip frame by two constant bilinear matrices,
-> dlib's ``(x - mean) / 256`` -> ResNet -> L2 norm -> ``EMBEDDING`` float32 ``[N,128]``.
``chip_input=True`` takes dlib's chip itself (``FACE`` ``[N,150,150,3]``, as
``dlib.get_face_chip(img, shape, 150, 0.25)`` makes it) and also outputs the raw
``DESCRIPTOR``, which is what dlib's ``compute_face_descriptor`` returns.

Read from dlib's source (serialize.h, float_details.h, dnn/core.h, layers.h, input.h,
cuda/tensor.h, cuda/cpu_dlib.cpp, image_transforms/interpolation.h):

- integers: a control byte (0x80: negative, low 4 bits: byte count) then little-endian
  bytes; floats: mantissa (int64) then exponent (int16), value ``mantissa * 2**exponent``;
  strings: length then bytes; bools: ASCII ``'1'``/``'0'``; tensors: version 2, n, k, nr,
  nc, then little-endian float32 (NCHW).
- each wrapper writes its version then its subnetwork, and only then (add_layer) its
  layer's details: the file holds the versions from the loss down to the input, then
  the details from the input up. Tags and skips write nothing but their version, so the
  structure cannot be read from the file: it is checked against :data:`RESNET_V1`.
- ``con_``: weights OIHW, cross-correlation, then one bias per filter; padding 0 when the
  stride is not 1, else half the filter (read from the file, checked).
- ``add_prev_`` of tensors of different shapes: the larger of each dimension, each input
  zero-padded at the end (cpu ``add``): the stride-2 residual blocks add 64 <- 32
  channels, and at 8x8 -> 3x3 (conv) against 4x4 (avg_pool) a 4x4 sum with the conv's
  output in its top-left 3x3 corner.
- pooling windows never overhang with padding 0, ``avg_pool<0,0>`` is a global mean.
- the loss (``loss_metric_``) outputs the ``fc_no_bias`` output as is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from kyc.face.align import ARCFACE_TEMPLATE, FACE_SIZE, umeyama

from .convert import SFACE_TARGET_OPSET, finish_model, l2_normalize_nodes, preprocess_nodes
from .errors import ConversionError
from .graph import const, set_metadata, tensor_info

MODEL_NAME = "face_embedding"
INPUT_NAME = "FACE"
OUTPUT_NAME = "EMBEDDING"
DESCRIPTOR_NAME = "DESCRIPTOR"  # chip_input models only: dlib's un-normalised descriptor
OPSET = SFACE_TARGET_OPSET
CHIP_SIZE = 150
CHIP_PADDING = 0.25  # dlib.get_face_chip's and compute_face_descriptor's default
# dlib's mean face shape (get_face_chip_details, 68-point branch), points 17..67 of the
# iBUG 300-W layout, in [0, 1] before padding.
MEAN_FACE_X = (
    0.000213256, 0.0752622, 0.18113, 0.29077, 0.393397, 0.586856, 0.689483, 0.799124,
    0.904991, 0.98004, 0.490127, 0.490127, 0.490127, 0.490127, 0.36688, 0.426036,
    0.490127, 0.554217, 0.613373, 0.121737, 0.187122, 0.265825, 0.334606, 0.260918,
    0.182743, 0.645647, 0.714428, 0.793132, 0.858516, 0.79751, 0.719335, 0.254149,
    0.340985, 0.428858, 0.490127, 0.551395, 0.639268, 0.726104, 0.642159, 0.556721,
    0.490127, 0.423532, 0.338094, 0.290379, 0.428096, 0.490127, 0.552157, 0.689874,
    0.553364, 0.490127, 0.42689,
)  # fmt: skip
MEAN_FACE_Y = (
    0.106454, 0.038915, 0.0187482, 0.0344891, 0.0773906, 0.0773906, 0.0344891,
    0.0187482, 0.038915, 0.106454, 0.203352, 0.307009, 0.409805, 0.515625, 0.587326,
    0.609345, 0.628106, 0.609345, 0.587326, 0.216423, 0.178758, 0.179852, 0.231733,
    0.245099, 0.244077, 0.231733, 0.179852, 0.178758, 0.216423, 0.244077, 0.245099,
    0.780233, 0.745405, 0.727388, 0.742578, 0.727388, 0.745405, 0.780233, 0.864805,
    0.902192, 0.909281, 0.902192, 0.864805, 0.784792, 0.778746, 0.785343, 0.778746,
    0.784792, 0.824182, 0.831803, 0.824182,
)  # fmt: skip
MEAN_FACE_FIRST = 17
# ARCFACE_TEMPLATE's five points as iBUG 300-W points: eye centres (image left, right),
# nose tip, mouth corners (image left, right).
TEMPLATE_POINTS = ((36, 37, 38, 39, 40, 41), (42, 43, 44, 45, 46, 47), (30,), (48,), (54,))
# Radians. The least-squares similarity between the two frames turns by -0.0056 (the
# ArcFace template is not quite level); dropping that moves chip pixels by 0.28 crop px
# at the corners at most: a rotation under this bound is dropped (separable resampling).
MAX_ROTATION = 0.01

_FLOAT_SPECIAL = {32000: math.inf, 32001: -math.inf, 32002: math.nan}


# --------------------------------------------------------------------------- architecture


@dataclass(frozen=True)
class Expect:
    """One wrapper of the network, outermost first: a layer (details ``kind``) or a
    ``tag``/``skip`` with its id; ``attrs`` are values the file must hold."""

    kind: str
    tag: int = 0
    attrs: Mapping[str, int] = field(default_factory=dict)


def _window(size: int, stride: int) -> dict[str, int]:
    """Square window geometry with dlib's default padding: 0 for strides other than 1,
    else half the window (con_, max_pool_, avg_pool_ templates)."""
    pad = 0 if stride != 1 else size // 2
    return {"nr": size, "nc": size, "stride_y": stride, "stride_x": stride,
            "padding_y": pad, "padding_x": pad}


def _con(filters: int, size: int, stride: int) -> Expect:
    return Expect("con", attrs={"num_filters": filters, **_window(size, stride)})


def _pool(kind: str, size: int, stride: int) -> Expect:
    return Expect(kind, attrs=_window(size, stride))


_AFFINE, _RELU = Expect("affine"), Expect("relu")


def _block(n: int, stride: int, sub: list[Expect]) -> list[Expect]:
    """``BN<con<N,3,3,1,1,relu<BN<con<N,3,3,stride,stride,SUBNET>>>>>``."""
    return [_AFFINE, _con(n, 3, 1), _RELU, _AFFINE, _con(n, 3, stride), *sub]


def _ares(n: int, sub: list[Expect]) -> list[Expect]:
    """``relu<add_prev1<block<N,1,tag1<SUBNET>>>>``."""
    return [_RELU, Expect("add_prev", 1), *_block(n, 1, [Expect("tag", 1), *sub])]


def _ares_down(n: int, sub: list[Expect]) -> list[Expect]:
    """``relu<add_prev2<avg_pool<2,2,2,2,skip1<tag2<block<N,2,tag1<SUBNET>>>>>>>``."""
    return [_RELU, Expect("add_prev", 2), _pool("avg_pool", 2, 2), Expect("skip", 1),
            Expect("tag", 2), *_block(n, 2, [Expect("tag", 1), *sub])]


def _resnet_v1() -> tuple[Expect, ...]:
    """``anet_type`` of dlib's examples/dnn_face_recognition_ex.cpp, outermost first."""
    net = [_pool("max_pool", 3, 2), _RELU, _AFFINE, _con(32, 7, 2), Expect("input")]
    levels = [(32, 3, False), (64, 3, True), (128, 2, True), (256, 2, True), (256, 0, True)]
    for width, plain, down in levels:  # alevel4 .. alevel0
        if down:
            net = _ares_down(width, net)
        for _ in range(plain):
            net = _ares(width, net)
    fc = Expect("fc", attrs={"num_outputs": 128, "bias_mode": 1})  # fc_no_bias
    return (Expect("loss_metric"), fc, _pool("avg_pool", 0, 1), *net)


RESNET_V1 = _resnet_v1()


@dataclass(frozen=True)
class DlibLayer:
    """A layer as read, innermost (the input) first: ``kind`` as in :class:`Expect`,
    numpy weights and the geometry of the file in ``params``."""

    kind: str
    tag: int = 0
    params: Mapping[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- reading


class _Reader:
    """dlib's serialization primitives over a bytes buffer; errors name the offset."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def fail(self, what: str) -> ConversionError:
        return ConversionError(f"{MODEL_NAME}: dlib .dat at byte {self.pos}: {what}")

    def take(self, count: int) -> bytes:
        if self.pos + count > len(self.data):
            raise self.fail(f"truncated, {count} more bytes wanted")
        chunk = self.data[self.pos : self.pos + count]
        self.pos += count
        return chunk

    def int_(self, signed: bool = True) -> int:
        control = self.take(1)[0]
        size = control & 0x0F
        if size == 0 or size > 8 or control & 0x70 or (control & 0x80 and not signed):
            raise self.fail(f"not a dlib integer (control byte {control:#04x})")
        value = int.from_bytes(self.take(size), "little")
        return -value if control & 0x80 else value

    def float_(self) -> float:
        if self.data[self.pos : self.pos + 1] and self.data[self.pos] & 0x70:
            raise self.fail("float in dlib's old text format, not supported")
        mantissa, exponent = self.int_(), self.int_()
        if exponent in _FLOAT_SPECIAL:
            return _FLOAT_SPECIAL[exponent]
        return math.ldexp(mantissa, exponent)

    def bool_(self) -> bool:
        byte = self.take(1)
        if byte not in (b"0", b"1"):
            raise self.fail(f"not a dlib bool ({byte!r})")
        return byte == b"1"

    def string(self) -> str:
        return self.take(self.int_(signed=False)).decode("latin-1")

    def version(self, what: str, allowed: Sequence[int]) -> int:
        version = self.int_()
        if version not in allowed:
            raise self.fail(f"{what} version {version}, expected one of {list(allowed)}")
        return version

    def shape(self) -> tuple[int, int, int, int]:
        n, k, nr, nc = (self.int_() for _ in range(4))
        if min(n, k, nr, nc) < 0:
            raise self.fail(f"negative tensor shape {(n, k, nr, nc)}")
        return n, k, nr, nc

    def tensor(self) -> np.ndarray:
        self.version("tensor", (2,))
        shape = self.shape()
        count = math.prod(shape)
        return np.frombuffer(self.take(4 * count), "<f4").reshape(shape).astype(np.float32)

    def alias(self) -> tuple[int, int, int, int]:
        self.version("alias_tensor", (1,))
        return self.shape()


def _split(params: np.ndarray, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    """Consecutive pieces of a layer's flat parameter tensor, which they must fill."""
    flat, sizes = params.reshape(-1), [math.prod(s) for s in shapes]
    if sum(sizes) != flat.size:
        raise ConversionError(
            f"{MODEL_NAME}: parameters hold {flat.size} values, the layer's shapes "
            f"{list(shapes)} need {sum(sizes)}"
        )
    ends = np.cumsum(sizes)
    return [flat[e - n : e].reshape(s) for e, n, s in zip(ends, sizes, shapes, strict=True)]


def _read_con(r: _Reader, version: str) -> dict[str, Any]:
    params, num_filters = r.tensor(), r.int_()
    geometry = {key: r.int_() for key in ("nr", "nc", "stride_y", "stride_x",
                                          "padding_y", "padding_x")}
    filters, biases = r.alias(), r.alias()
    _multipliers = [r.float_() for _ in range(4)]  # learning rate / weight decay
    use_bias = r.bool_() if version in ("con_5", "con_6") else True
    if version == "con_6" and r.bool_():
        raise r.fail("con_ with a fused relu (use_relu) is not supported")
    if filters[0] != num_filters or filters[2:] != (geometry["nr"], geometry["nc"]):
        raise r.fail(f"con_ filter shape {filters} does not fit {num_filters} filters")
    weights = _split(params, filters, biases) if use_bias else _split(params, filters)
    bias = weights[1].reshape(-1) if use_bias else np.zeros(num_filters, np.float32)
    return {"num_filters": num_filters, **geometry, "weight": weights[0], "bias": bias}


def _read_affine(r: _Reader, version: str) -> dict[str, Any]:
    params, gamma, beta = r.tensor(), r.alias(), r.alias()
    mode = r.int_()
    disabled = r.bool_() if version == "affine_2" else False
    if mode != 0:
        raise r.fail(f"affine_ in mode {mode}, only CONV_MODE (0) is supported")
    if disabled:
        return {"gamma": None, "beta": None}
    g, b = _split(params, gamma, beta)
    return {"gamma": g.reshape(-1), "beta": b.reshape(-1)}


def _read_bn_con(r: _Reader, version: str) -> dict[str, Any]:
    """A batch norm layer, which dlib turns into an affine_ on loading (same arithmetic)."""
    params, gamma, beta = r.tensor(), r.alias(), r.alias()
    _means, _invstds, running_means, running_variances = (r.tensor() for _ in range(4))
    _updates, _window = r.int_(signed=False), r.int_(signed=False)
    _multipliers = [r.float_() for _ in range(4)]
    eps = np.float32(r.float_())
    g, b = (a.reshape(-1) for a in _split(params, gamma, beta))
    scale = g / np.sqrt(running_variances.reshape(-1) + eps)
    return {"gamma": scale, "beta": b - scale * running_means.reshape(-1)}


def _read_relu(r: _Reader, version: str) -> dict[str, Any]:
    if version == "relu_2" and r.bool_():
        raise r.fail("disabled relu_ is not supported")
    return {}


def _read_pool(r: _Reader, version: str) -> dict[str, Any]:
    return {key: r.int_() for key in ("nr", "nc", "stride_y", "stride_x",
                                      "padding_y", "padding_x")}


def _read_fc(r: _Reader, version: str) -> dict[str, Any]:
    num_outputs, num_inputs = r.int_(signed=False), r.int_(signed=False)
    params, weights, _biases = r.tensor(), r.alias(), r.alias()
    bias_mode = r.int_()
    _multipliers = [r.float_() for _ in range(4)]
    use_bias = r.bool_() if version == "fc_3" else True
    if bias_mode == 0 and use_bias:
        raise r.fail("fc_ with a bias is not supported (this net has fc_no_bias)")
    if weights[:2] != (num_inputs, num_outputs):
        raise r.fail(f"fc_ weight shape {weights} does not fit {num_inputs}->{num_outputs}")
    (w,) = _split(params, (num_inputs, num_outputs))
    return {"num_outputs": num_outputs, "bias_mode": bias_mode, "weight": w}


def _read_input(r: _Reader, version: str) -> dict[str, Any]:
    mean = [r.float_() for _ in range(3)]  # red, green, blue
    size = (r.int_(signed=False), r.int_(signed=False))
    if size != (CHIP_SIZE, CHIP_SIZE):
        raise r.fail(f"input_rgb_image_sized of {size}, expected {CHIP_SIZE}x{CHIP_SIZE}")
    return {"mean_rgb": mean, "size": size}


def _read_loss_metric(r: _Reader, version: str) -> dict[str, Any]:
    if version == "loss_metric_":
        return {"margin": 0.1, "distance_threshold": 0.75}  # then hard-coded in dlib
    return {"margin": r.float_(), "distance_threshold": r.float_()}


def _read_add_prev(r: _Reader, version: str) -> dict[str, Any]:
    return {}


# Details names (dlib's version strings) each kind accepts, with their reader.
_DETAILS: dict[str, dict[str, Callable[[_Reader, str], dict[str, Any]]]] = {
    "con": dict.fromkeys(("con_4", "con_5", "con_6"), _read_con),
    "affine": {**dict.fromkeys(("affine_", "affine_2"), _read_affine), "bn_con2": _read_bn_con},
    "relu": dict.fromkeys(("relu_", "relu_2"), _read_relu),
    "max_pool": {"max_pool_2": _read_pool},
    "avg_pool": {"avg_pool_2": _read_pool},
    "add_prev": {"add_prev_": _read_add_prev},
    "fc": dict.fromkeys(("fc_2", "fc_3"), _read_fc),
    "input": {"input_rgb_image_sized": _read_input},
    "loss_metric": dict.fromkeys(("loss_metric_", "loss_metric_2"), _read_loss_metric),
}


def _read_details(r: _Reader, expect: Expect) -> DlibLayer:
    at = r.pos
    name = r.string()
    reader = _DETAILS[expect.kind].get(name)
    if reader is None:
        raise ConversionError(
            f"{MODEL_NAME}: dlib .dat at byte {at}: found layer {name!r} where the network "
            f"has {expect.kind} ({', '.join(_DETAILS[expect.kind])})"
        )
    params = reader(r, name)
    wrong = {k: (params.get(k), v) for k, v in expect.attrs.items() if params.get(k) != v}
    if wrong:
        raise ConversionError(
            f"{MODEL_NAME}: dlib .dat at byte {at}: {name} has (found, expected) {wrong}"
        )
    return DlibLayer(expect.kind, expect.tag, params)


def read_dat(data: bytes, network: Sequence[Expect] = RESNET_V1) -> list[DlibLayer]:
    """The layers of a dlib network file, innermost (the input) first, tags and skips in
    place; raises :class:`ConversionError` where the file departs from ``network``."""
    r = _Reader(data)
    loss, wrappers = network[0], network[1:]
    if loss.kind != "loss_metric" or wrappers[-1].kind != "input":
        raise ConversionError(f"{MODEL_NAME}: network must run from a loss to an input")
    r.version("add_loss_layer", (1,))
    top = _read_details(r, loss)
    layers = wrappers[:-2]  # down to the layer that sits on the input
    versions = [_read_wrapper_version(r, expect) for expect in layers]
    innermost_version = r.version("add_layer (on the input)", (2, 3))
    found = [_read_details(r, wrappers[-1]), _read_details(r, wrappers[-2])]
    _read_input_layer_state(r, innermost_version)
    for expect, version in zip(reversed(layers), reversed(versions), strict=True):
        if expect.kind in ("tag", "skip"):
            found.append(DlibLayer(expect.kind, expect.tag))
            continue
        found.append(_read_details(r, expect))
        _read_layer_state(r, version)
    if r.pos != len(data):
        raise r.fail(f"{len(data) - r.pos} bytes left after the network")
    return [*found, top]


def _read_wrapper_version(r: _Reader, expect: Expect) -> int:
    if expect.kind in ("tag", "skip"):
        return r.version(f"add_{expect.kind}_layer", (1,))
    return r.version("add_layer", (1, 2))


def _read_layer_state(r: _Reader, version: int) -> None:
    """What add_layer saves after its details: three flags and scratch tensors."""
    for _ in range(3):  # setup called, gradient input stale, output disabled
        r.bool_()
    for _ in range(3 if version == 2 else 2):  # x_grad, cached_output[, params_grad]
        r.tensor()


def _read_input_layer_state(r: _Reader, version: int) -> None:
    for _ in range(3):
        r.bool_()
    for _ in range(3):  # x_grad, cached_output, grad_final
        r.tensor()
    if version == 3:
        r.int_(signed=False)  # sample expansion factor


# --------------------------------------------------------------------------- graph


class _Graph:
    """Nodes and initializers under construction, with the static [C, H, W] of each
    tensor (add_prev_ of unequal shapes needs them)."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.shapes: dict[str, tuple[int, int, int]] = {}

    def add(self, op: str, inputs: Sequence[str], name: str,
            shape: tuple[int, int, int] | None, consts: Mapping[str, np.ndarray] | None = None,
            **attrs: Any) -> str:
        """One node ``name`` of ``op`` on ``inputs`` then ``consts`` (initializers)."""
        consts = consts or {}
        const_names = [f"{name}/{key}" for key in consts]
        self.inits += [const(n, v) for n, v in zip(const_names, consts.values(), strict=True)]
        self.nodes.append(helper.make_node(op, [*inputs, *const_names], [name], name=name,
                                           **attrs))
        if shape is not None:
            self.shapes[name] = shape
        return name


def _conv_out(size: int, window: int, stride: int, pad: int) -> int:
    return 1 + (size + 2 * pad - window) // stride


def _emit_con(g: _Graph, x: str, name: str, p: Mapping[str, Any]) -> str:
    c, h, w = g.shapes[x]
    if p["weight"].shape[1] != c:
        raise ConversionError(f"{MODEL_NAME}: {name} has filters of {p['weight'].shape[1]} "
                              f"channels for an input of {c}")
    shape = (p["num_filters"], _conv_out(h, p["nr"], p["stride_y"], p["padding_y"]),
             _conv_out(w, p["nc"], p["stride_x"], p["padding_x"]))
    pads = [p["padding_y"], p["padding_x"]] * 2
    return g.add("Conv", [x], name, shape, {"W": p["weight"], "B": p["bias"]},
                 kernel_shape=[p["nr"], p["nc"]], strides=[p["stride_y"], p["stride_x"]],
                 pads=pads)


def _emit_affine(g: _Graph, x: str, name: str, p: Mapping[str, Any]) -> str:
    if p["gamma"] is None:  # a disabled affine_ is the identity
        return x
    scaled = g.add("Mul", [x], f"{name}/gamma", g.shapes[x],
                   {"value": p["gamma"].reshape(1, -1, 1, 1)})
    return g.add("Add", [scaled], name, g.shapes[x], {"value": p["beta"].reshape(1, -1, 1, 1)})


def _emit_pool(g: _Graph, x: str, name: str, p: Mapping[str, Any], op: str) -> str:
    c, h, w = g.shapes[x]
    if p["nr"] == 0 and p["nc"] == 0:  # avg_pool_everything
        return g.add(f"Global{op}", [x], name, (c, 1, 1))
    shape = (c, _conv_out(h, p["nr"], p["stride_y"], p["padding_y"]),
             _conv_out(w, p["nc"], p["stride_x"], p["padding_x"]))
    # dlib pools over the window clipped to the image: ONNX's default (pads excluded).
    return g.add(op, [x], name, shape, kernel_shape=[p["nr"], p["nc"]],
                 strides=[p["stride_y"], p["stride_x"]], pads=[p["padding_y"], p["padding_x"]] * 2)


def _emit_add_prev(g: _Graph, x: str, other: str, name: str) -> str:
    """dlib's add of unequal tensors: the larger size in each dimension, each input
    zero-padded at its end."""
    shape = tuple(max(a, b) for a, b in zip(g.shapes[x], g.shapes[other], strict=True))
    padded = [_pad_to(g, t, shape, f"{name}/pad{i}") for i, t in enumerate((x, other))]
    return g.add("Add", padded, name, shape)


def _pad_to(g: _Graph, x: str, shape: tuple[int, ...], name: str) -> str:
    if g.shapes[x] == shape:
        return x
    ends = [0, *(big - small for big, small in zip(shape, g.shapes[x], strict=True))]
    pads = np.array([0, 0, 0, 0, *ends], np.int64)
    return g.add("Pad", [x], name, shape, {"pads": pads}, mode="constant")


def _emit_fc(g: _Graph, x: str, name: str, p: Mapping[str, Any]) -> str:
    flat = g.add("Flatten", [x], f"{name}/flatten", None, axis=1)
    return g.add("MatMul", [flat], name, None, {"weight": p["weight"]})


def network_nodes(layers: Sequence[DlibLayer], source: str) -> tuple[_Graph, str]:
    """The ONNX nodes of ``layers`` (from :func:`read_dat`) on ``source``, dlib's
    normalised NCHW chip; returns the graph and its output, the raw descriptor."""
    g, x, tags = _Graph(), source, {}
    g.shapes[source] = (3, CHIP_SIZE, CHIP_SIZE)
    for i, layer in enumerate(layers):
        name, p = f"dlib/{i:03d}_{layer.kind}", layer.params
        if layer.kind == "tag":
            tags[layer.tag] = x
        elif layer.kind == "skip":
            x = tags[layer.tag]
        elif layer.kind == "add_prev":
            x = _emit_add_prev(g, x, tags[layer.tag], name)
        elif layer.kind in _EMITTERS:
            x = _EMITTERS[layer.kind](g, x, name, p)
        elif layer.kind not in ("input", "loss_metric"):  # pre- and post-processing
            raise ConversionError(f"{MODEL_NAME}: no ONNX for dlib layer {layer.kind}")
    return g, x


_EMITTERS: dict[str, Callable[[_Graph, str, str, Mapping[str, Any]], str]] = {
    "con": _emit_con,
    "affine": _emit_affine,
    "relu": lambda g, x, name, p: g.add("Relu", [x], name, g.shapes[x]),
    "max_pool": lambda g, x, name, p: _emit_pool(g, x, name, p, "MaxPool"),
    "avg_pool": lambda g, x, name, p: _emit_pool(g, x, name, p, "AveragePool"),
    "fc": _emit_fc,
}


# --------------------------------------------------------------------------- chip frame


def chip_landmarks(size: int = CHIP_SIZE, padding: float = CHIP_PADDING) -> np.ndarray:
    """ARCFACE_TEMPLATE's five points on dlib's face chip, in its pixel coordinates.

    get_face_chip_details puts mean-face point ``p`` at ``(padding + p) / (1 + 2 padding)
    * size``; extract_image_chips then maps the chip's corner pixels (0 and size - 1) to
    the corners of a box ``size * scale - 1`` image pixels wide around that transform's
    image of ``size / 2``: at one image pixel per chip pixel, the chip's pixels sit half a
    pixel below those points (at 2 or more, a further 0.2 px or less towards the centre
    at the landmarks, up to 0.5 px at the edges).
    """
    mean = np.stack([MEAN_FACE_X, MEAN_FACE_Y], axis=1)
    points = np.array([mean[[i - MEAN_FACE_FIRST for i in group]].mean(axis=0)
                       for group in TEMPLATE_POINTS])
    return (padding + points) / (1 + 2 * padding) * size - 0.5


def chip_to_crop(size: int = CHIP_SIZE, padding: float = CHIP_PADDING) -> tuple[float, np.ndarray]:
    """``(scale, offset)``: chip pixel ``q`` (x, y) shows ArcFace crop point ``scale * q +
    offset``; least squares over the five template points, without rotation.

    Raises if the full similarity fit rotates by more than :data:`MAX_ROTATION`: the
    separable resampling could not follow it.
    """
    src, dst = chip_landmarks(size, padding), np.asarray(ARCFACE_TEMPLATE, np.float64)
    fit = umeyama(src, dst)  # the face path's own similarity fit
    angle = math.atan2(fit[1, 0], fit[0, 0])
    if abs(angle) > MAX_ROTATION:
        raise ConversionError(
            f"{MODEL_NAME}: the chip and ArcFace frames differ by a {angle:.4f} rad rotation"
        )
    scale = float(fit[0, 0])  # s cos(angle): the least-squares scale without the rotation
    return scale, dst.mean(axis=0) - scale * src.mean(axis=0)


def resample_matrix(scale: float, offset: float, out_size: int = CHIP_SIZE,
                    in_size: int = FACE_SIZE) -> np.ndarray:
    """``[out_size, in_size]`` bilinear weights: row ``q`` samples input coordinate
    ``scale * q + offset`` (pixel centres at integers), clamped to the edge pixels."""
    where = np.clip(scale * np.arange(out_size) + offset, 0, in_size - 1)
    low = np.minimum(np.floor(where).astype(np.int64), in_size - 2)
    frac = where - low
    matrix = np.zeros((out_size, in_size), np.float64)
    rows = np.arange(out_size)
    matrix[rows, low] = 1 - frac
    matrix[rows, low + 1] += frac
    return matrix.astype(np.float32)


def outside_crop(scale: float, offset: np.ndarray, size: int = CHIP_SIZE) -> dict[str, float]:
    """Fraction of chip pixels beyond the crop's edge pixel centres, per side and in all."""
    coords = scale * np.arange(size)[:, None] + offset  # [q, (x, y)]
    low, high = coords < 0, coords > FACE_SIZE - 1
    x_in, y_in = ~(low[:, 0] | high[:, 0]), ~(low[:, 1] | high[:, 1])
    return {"left": low[:, 0].mean(), "right": high[:, 0].mean(), "top": low[:, 1].mean(),
            "bottom": high[:, 1].mean(), "all": 1 - x_in.mean() * y_in.mean()}


# --------------------------------------------------------------------------- model


def convert_dlib_resnet(dat: bytes, *, chip_input: bool = False) -> onnx.ModelProto:
    """dlib's ResNet: ``FACE uint8 [N,112,112,3]`` ArcFace crop -> ``EMBEDDING [N,128]``.

    With ``chip_input``, ``FACE`` is dlib's ``[N,150,150,3]`` chip and the raw
    ``DESCRIPTOR [N,128]`` (dlib's ``compute_face_descriptor``) is a second output.
    """
    layers = read_dat(dat)
    side = CHIP_SIZE if chip_input else FACE_SIZE
    chip = "dlib/chip" if chip_input else "kyc_pre/crop"
    pre, inits = preprocess_nodes(chip, source=INPUT_NAME, to_bgr=False,
                                  mean=layers[0].params["mean_rgb"], scale=[1 / 256] * 3)
    if not chip_input:  # mean subtraction commutes with resampling: its rows sum to 1
        resample, resample_inits, transform = _resample_nodes(chip, "dlib/chip")
        pre, inits = [*pre, *resample], [*inits, *resample_inits]
    net, descriptor = network_nodes(layers, "dlib/chip")
    post, post_inits = l2_normalize_nodes(descriptor, OUTPUT_NAME, OPSET)
    outputs = [tensor_info(OUTPUT_NAME, TensorProto.FLOAT, ["N", 128])]
    if chip_input:
        post.append(helper.make_node("Identity", [descriptor], [DESCRIPTOR_NAME]))
        outputs.append(tensor_info(DESCRIPTOR_NAME, TensorProto.FLOAT, ["N", 128]))
    graph = helper.make_graph(
        [*pre, *net.nodes, *post], MODEL_NAME,
        [tensor_info(INPUT_NAME, TensorProto.UINT8, ["N", side, side, 3])],
        outputs, [*inits, *net.inits, *post_inits],
    )
    opsets = [helper.make_opsetid("", OPSET)]
    # IR 8, as the shipped face_embedding: make_model's default is onnx's newest IR.
    model = helper.make_model(graph, opset_imports=opsets,
                              ir_version=helper.find_min_ir_version_for(opsets))
    if not chip_input:
        set_metadata(model, {"kyc.dlib_chip_from_crop": transform})
    return finish_model(model, MODEL_NAME)


def _resample_nodes(source: str, target: str) -> tuple[list[onnx.NodeProto],
                                                       list[TensorProto], str]:
    """``[N,3,112,112]`` crop -> ``[N,3,150,150]`` chip: ``Ry @ crop @ Rx^T``; also the
    transform in words, for the model's metadata."""
    scale, offset = chip_to_crop()
    rows, cols = (resample_matrix(scale, float(o)) for o in (offset[1], offset[0]))
    p = "kyc_pre/resample"
    nodes = [
        helper.make_node("MatMul", [f"{p}/rows", source], [f"{p}/by_rows"], name=f"{p}/rows"),
        helper.make_node("MatMul", [f"{p}/by_rows", f"{p}/cols_t"], [target], name=f"{p}/cols"),
    ]
    inits = [const(f"{p}/rows", rows), const(f"{p}/cols_t", cols.T)]
    words = (f"bilinear, edge-clamped: crop (x, y) = {scale:.6f} * chip (x, y) + "
             f"({offset[0]:.4f}, {offset[1]:.4f})")
    return nodes, inits, words
