"""Hand-written programs over the module kinds other than linear and dropout (batch_norm,
layer_norm, rms_norm, group_norm, conv2d, embedding, prelu): their transforms, running
statistics and parameters (shared by the reproducer and module tests)."""

from __future__ import annotations

from typing import Any

from difftest.program.ir import Program
from difftest.program.jsonio import program_from_dict


def _t(data: list[float]) -> dict[str, Any]:
    return {"shape": [len(data)], "data": data}


def _leaf(ident: str, shape: list[int], data: list[float], rg: bool = False, device: str = "autodiff"
          ) -> dict[str, Any]:
    return {"id": ident, "kind": "leaf", "shape": shape, "data": data, "device": device, "require_grad": rg}


def _doc(*statements: dict[str, Any]) -> Program:
    return program_from_dict({"format": "difftest-program", "version": 1, "statements": list(statements)})


BN = {"id": "bn", "kind": "module", "module": "batch_norm", "num_features": 3, "epsilon": 1e-5, "momentum": 0.25,
      "weight": _t([1.5, -0.5, 0.75]), "bias": _t([0.25, 1.0, -0.5]),
      "running_mean": _t([0.1, -0.2, 0.0]), "running_var": _t([1.0, 0.5, 2.0])}

# two train forwards through handles that share the running state (no_grad, freeze, unfreeze),
# reads after each, a [N, C, L] and a [N, C, H, W] input, valid() and a forward on the stats
BATCH_NORM_TRANSFORMS = _doc(
    BN,
    _leaf("x", [2, 3, 2], [1.0, 2.0, -1.0, 0.5, 3.0, 2.5, 0.0, -2.0, 4.0, 1.0, -0.5, 1.5], rg=True),
    _leaf("x4", [2, 3, 1, 2], [0.5, -1.0, 2.0, 1.0, 0.25, -0.75, 1.5, 3.0, -2.0, 0.0, 1.0, 2.5]),
    {"id": "y", "kind": "apply", "module": "bn", "input": "x"},
    {"id": "m1", "kind": "param", "module": "bn", "param": "running_mean"},
    {"id": "ng", "kind": "transform", "transform": "no_grad", "input": "bn"},
    {"id": "y2", "kind": "apply", "module": "ng", "input": "x4"},
    {"id": "v2", "kind": "param", "module": "bn", "param": "running_var"},
    {"id": "fr", "kind": "transform", "transform": "freeze", "input": "bn"},
    {"id": "y3", "kind": "apply", "module": "fr", "input": "x"},
    {"id": "uf", "kind": "transform", "transform": "unfreeze", "input": "fr"},
    {"id": "y4", "kind": "apply", "module": "uf", "input": "x4"},
    {"id": "m4", "kind": "param", "module": "bn", "param": "running_mean"},
    {"id": "va", "kind": "transform", "transform": "valid", "input": "bn"},
    {"id": "y5", "kind": "apply", "module": "va", "input": "x"},
    {"id": "tr", "kind": "transform", "transform": "train", "input": "va"},
    {"id": "y6", "kind": "apply", "module": "tr", "input": "x"},
    {"id": "v6", "kind": "param", "module": "tr", "param": "running_var"},
    {"id": "v6b", "kind": "param", "module": "bn", "param": "running_var"},
    {"id": "w", "kind": "param", "module": "bn", "param": "weight"},
    {"id": "c", "kind": "op", "op": "mul", "inputs": ["y", "x"]},
    {"id": "s", "kind": "op", "op": "sum", "inputs": ["c"]},
    {"id": "bw", "kind": "backward", "input": "s"},
)

LAYER_NORM = _doc(
    {"id": "ln", "kind": "module", "module": "layer_norm", "d_model": 3, "epsilon": 1e-5,
     "weight": _t([1.5, -0.5, 0.75]), "bias": _t([0.25, 1.0, -0.5])},
    {"id": "ln0", "kind": "module", "module": "layer_norm", "d_model": 2, "epsilon": 0.001,
     "weight": _t([2.0, 0.5]), "bias": None},
    _leaf("x", [2, 3], [1.0, 2.0, -1.0, 0.5, 3.0, 2.5], rg=True),
    _leaf("z", [2, 2, 2], [0.5, -1.0, 2.0, 1.0, 0.25, -0.75, 1.5, 3.0]),
    {"id": "y", "kind": "apply", "module": "ln", "input": "x"},
    {"id": "yz", "kind": "apply", "module": "ln0", "input": "z"},
    {"id": "fr", "kind": "transform", "transform": "freeze", "input": "ln"},
    {"id": "y2", "kind": "apply", "module": "fr", "input": "x"},
    {"id": "va", "kind": "transform", "transform": "valid", "input": "ln"},
    {"id": "y3", "kind": "apply", "module": "va", "input": "x"},
    {"id": "w", "kind": "param", "module": "ln", "param": "weight"},
    {"id": "b", "kind": "param", "module": "ln", "param": "bias"},
    {"id": "c", "kind": "op", "op": "mul", "inputs": ["y", "x"]},
    {"id": "s", "kind": "op", "op": "sum", "inputs": ["c"]},
    {"id": "bw", "kind": "backward", "input": "s"},
)

RMS_NORM = _doc(
    {"id": "rn", "kind": "module", "module": "rms_norm", "d_model": 3, "epsilon": 1e-3,
     "weight": _t([1.5, -0.5, 0.75])},
    _leaf("x", [2, 3], [1.0, 2.0, -1.0, 0.5, 0.03, 0.02], rg=True),
    _leaf("z", [4, 1, 3], [0.5, -1.0, 2.0, 1.0, 0.25, -0.75, 1.5, 3.0, 0.5, -2.0, 1.0, 0.0]),
    {"id": "y", "kind": "apply", "module": "rn", "input": "x"},
    {"id": "yz", "kind": "apply", "module": "rn", "input": "z"},
    {"id": "ng", "kind": "transform", "transform": "no_grad", "input": "rn"},
    {"id": "y2", "kind": "apply", "module": "ng", "input": "x"},
    {"id": "w", "kind": "param", "module": "rn", "param": "weight"},
    {"id": "c", "kind": "op", "op": "mul", "inputs": ["y", "x"]},
    {"id": "s", "kind": "op", "op": "sum", "inputs": ["c"]},
    {"id": "bw", "kind": "backward", "input": "s"},
)

# a train-mode batch_norm forward of a plain-device input (burn's inference path), then of an
# autodiff one (the training path)
BATCH_NORM_PLAIN_INPUT = _doc(
    BN,
    _leaf("p", [2, 3], [1.0, 2.0, -1.0, 0.5, 3.0, 2.5], device="plain"),
    {"id": "yp", "kind": "apply", "module": "bn", "input": "p"},
    {"id": "m0", "kind": "param", "module": "bn", "param": "running_mean"},
    _leaf("a", [2, 3], [0.0, -2.0, 4.0, 1.0, -0.5, 1.5], rg=True),
    {"id": "ya", "kind": "apply", "module": "bn", "input": "a"},
    {"id": "m1", "kind": "param", "module": "bn", "param": "running_mean"},
    {"id": "s", "kind": "op", "op": "sum", "inputs": ["ya"]},
    {"id": "bw", "kind": "backward", "input": "s"},
)

GN = {"id": "gn", "kind": "module", "module": "group_norm", "num_groups": 2, "num_channels": 4, "epsilon": 1e-3,
      "weight": _t([1.5, -0.5, 0.75, 1.0]), "bias": _t([0.25, 1.0, -0.5, 0.0])}

# group_norm (2 groups of 2 channels) on [N, C], [N, C, L] and [N, C, H, W] inputs, every
# transform, its parameters, and one without affine parameters
GROUP_NORM = _doc(
    GN,
    {"id": "gp", "kind": "module", "module": "group_norm", "num_groups": 1, "num_channels": 4, "epsilon": 1e-5,
     "weight": None, "bias": None},
    _leaf("x", [2, 4, 2], [1.0, 2.0, -1.0, 0.5, 3.0, 2.5, 0.0, -2.0, 4.0, 1.0, -0.5, 1.5, 0.25, 2.0, -3.0, 1.0],
          rg=True),
    _leaf("x2", [3, 4], [0.5, -1.0, 2.0, 1.0, 0.25, -0.75, 1.5, 3.0, 0.5, -2.0, 1.0, 0.0]),
    _leaf("x4", [1, 4, 1, 3], [0.5, -1.0, 2.0, 1.0, 0.25, -0.75, 1.5, 3.0, -2.0, 0.0, 1.0, 2.5], rg=True),
    {"id": "y", "kind": "apply", "module": "gn", "input": "x"},
    {"id": "y2", "kind": "apply", "module": "gn", "input": "x2"},
    {"id": "va", "kind": "transform", "transform": "valid", "input": "gn"},
    {"id": "y3", "kind": "apply", "module": "va", "input": "x4"},
    {"id": "tr", "kind": "transform", "transform": "train", "input": "va"},
    {"id": "y4", "kind": "apply", "module": "tr", "input": "x"},
    {"id": "ng", "kind": "transform", "transform": "no_grad", "input": "gn"},
    {"id": "y5", "kind": "apply", "module": "ng", "input": "x4"},
    {"id": "fr", "kind": "transform", "transform": "freeze", "input": "gn"},
    {"id": "uf", "kind": "transform", "transform": "unfreeze", "input": "fr"},
    {"id": "y6", "kind": "apply", "module": "uf", "input": "x"},
    {"id": "yp", "kind": "apply", "module": "gp", "input": "x4"},
    {"id": "w", "kind": "param", "module": "gn", "param": "weight"},
    {"id": "b", "kind": "param", "module": "fr", "param": "bias"},
    {"id": "c", "kind": "op", "op": "mul", "inputs": ["y", "x"]},
    {"id": "s", "kind": "op", "op": "sum", "inputs": ["c"]},
    {"id": "c5", "kind": "op", "op": "mul", "inputs": ["y5", "yp"]},
    {"id": "s5", "kind": "op", "op": "sum", "inputs": ["c5"]},
    {"id": "s6", "kind": "op", "op": "sum", "inputs": ["y6"]},
    {"id": "t", "kind": "op", "op": "add", "inputs": ["s", "s5"]},
    {"id": "t2", "kind": "op", "op": "add", "inputs": ["t", "s6"]},
    {"id": "bw", "kind": "backward", "input": "t2"},
)

def _w4(shape: list[int], data: list[float]) -> dict[str, Any]:
    return {"shape": shape, "data": data}


# conv2d: 2 groups, stride, padding, dilation, a bias; every transform; its parameters (a rank-4
# weight); one without a bias and a 2x1 kernel
CONV2D = _doc(
    {"id": "cv", "kind": "module", "module": "conv2d", "stride": [1, 2], "padding": [1, 0], "dilation": [1, 1],
     "groups": 2, "weight": _w4([4, 1, 2, 2], [0.5, -1.0, 0.25, 0.75, 1.0, 0.5, -0.5, 0.125, -0.25, 0.5, 1.5, -1.0,
                                               0.75, 0.25, -0.75, 1.0]),
     "bias": _t([0.25, -0.5, 0.0, 1.0])},
    {"id": "cn", "kind": "module", "module": "conv2d", "stride": [1, 1], "padding": [0, 1], "dilation": [2, 1],
     "groups": 1, "weight": _w4([1, 2, 2, 1], [1.0, -0.5, 0.25, 2.0]), "bias": None},
    _leaf("x", [1, 2, 3, 4], [1.0, 2.0, -1.0, 0.5, 3.0, 2.5, 0.0, -2.0, 4.0, 1.0, -0.5, 1.5, 0.25, 2.0, -3.0, 1.0,
                              0.5, -1.0, 2.0, 1.0, 0.25, -0.75, 1.5, 3.0], rg=True),
    {"id": "y", "kind": "apply", "module": "cv", "input": "x"},
    {"id": "va", "kind": "transform", "transform": "valid", "input": "cv"},
    {"id": "y2", "kind": "apply", "module": "va", "input": "x"},
    {"id": "tr", "kind": "transform", "transform": "train", "input": "va"},
    {"id": "y3", "kind": "apply", "module": "tr", "input": "x"},
    {"id": "ng", "kind": "transform", "transform": "no_grad", "input": "cv"},
    {"id": "y4", "kind": "apply", "module": "ng", "input": "x"},
    {"id": "fr", "kind": "transform", "transform": "freeze", "input": "cv"},
    {"id": "uf", "kind": "transform", "transform": "unfreeze", "input": "fr"},
    {"id": "y5", "kind": "apply", "module": "uf", "input": "x"},
    {"id": "yn", "kind": "apply", "module": "cn", "input": "x"},
    {"id": "w", "kind": "param", "module": "cv", "param": "weight"},
    {"id": "b", "kind": "param", "module": "fr", "param": "bias"},
    {"id": "wn", "kind": "param", "module": "cn", "param": "weight"},
    {"id": "c", "kind": "op", "op": "mul", "inputs": ["y", "y4"]},
    {"id": "s", "kind": "op", "op": "sum", "inputs": ["c"]},
    {"id": "s5", "kind": "op", "op": "sum", "inputs": ["y5"]},
    {"id": "sn", "kind": "op", "op": "sum", "inputs": ["yn"]},
    {"id": "t", "kind": "op", "op": "add", "inputs": ["s", "s5"]},
    {"id": "t2", "kind": "op", "op": "add", "inputs": ["t", "sn"]},
    {"id": "bw", "kind": "backward", "input": "t2"},
)

# embedding: a table of 4 rows, forwards on indices with repeated rows (their gradients must
# accumulate), every transform, a plain-device leaf of indices, its weight read through handles
EMBEDDING = _doc(
    {"id": "em", "kind": "module", "module": "embedding",
     "weight": _w4([4, 3], [0.5, -1.0, 0.25, 0.75, 1.0, 0.5, -0.5, 0.125, -0.25, 0.5, 1.5, -1.0])},
    _leaf("i", [2, 3], [0.0, 2.0, 2.0, 3.0, 0.0, 2.0]),
    _leaf("ip", [1, 2], [1.0, 1.0], device="plain"),
    _leaf("x", [2, 3, 3], [0.5 * k - 2.0 for k in range(18)], rg=True),
    {"id": "y", "kind": "apply", "module": "em", "input": "i"},
    {"id": "va", "kind": "transform", "transform": "valid", "input": "em"},
    {"id": "y2", "kind": "apply", "module": "va", "input": "i"},
    {"id": "y2p", "kind": "apply", "module": "va", "input": "ip"},
    {"id": "tr", "kind": "transform", "transform": "train", "input": "va"},
    {"id": "y3", "kind": "apply", "module": "tr", "input": "i"},
    {"id": "ng", "kind": "transform", "transform": "no_grad", "input": "em"},
    {"id": "y4", "kind": "apply", "module": "ng", "input": "i"},
    {"id": "fr", "kind": "transform", "transform": "freeze", "input": "em"},
    {"id": "uf", "kind": "transform", "transform": "unfreeze", "input": "fr"},
    {"id": "y5", "kind": "apply", "module": "uf", "input": "ip"},
    {"id": "w", "kind": "param", "module": "em", "param": "weight"},
    {"id": "wf", "kind": "param", "module": "fr", "param": "weight"},
    {"id": "c", "kind": "op", "op": "mul", "inputs": ["y", "x"]},
    {"id": "s", "kind": "op", "op": "sum", "inputs": ["c"]},
    {"id": "c4", "kind": "op", "op": "mul", "inputs": ["y3", "y4"]},
    {"id": "s4", "kind": "op", "op": "sum", "inputs": ["c4"]},
    {"id": "s5", "kind": "op", "op": "sum", "inputs": ["y5"]},
    {"id": "t", "kind": "op", "op": "add", "inputs": ["s", "s4"]},
    {"id": "t2", "kind": "op", "op": "add", "inputs": ["t", "s5"]},
    {"id": "bw", "kind": "backward", "input": "t2"},
)

# prelu: one weight per channel on [N, C, L] and [N, C, H, W] inputs, a single weight on a
# rank-1 input, every transform, its weight read through handles; inputs off the kink at 0
PRELU = _doc(
    {"id": "pr", "kind": "module", "module": "prelu", "weight": _t([0.25, -0.5, 1.5])},
    {"id": "p1", "kind": "module", "module": "prelu", "weight": _t([0.75])},
    _leaf("x", [2, 3, 2], [1.0, -2.0, -1.0, 0.5, 3.0, -2.5, -0.25, -2.0, 4.0, 1.0, -0.5, 1.5], rg=True),
    _leaf("x4", [1, 3, 1, 2], [0.5, -1.0, 2.0, -1.5, 0.25, -0.75]),
    _leaf("z", [4], [-1.5, 2.0, -0.125, 0.5], rg=True),
    {"id": "y", "kind": "apply", "module": "pr", "input": "x"},
    {"id": "y1", "kind": "apply", "module": "p1", "input": "z"},
    {"id": "va", "kind": "transform", "transform": "valid", "input": "pr"},
    {"id": "y2", "kind": "apply", "module": "va", "input": "x4"},
    {"id": "tr", "kind": "transform", "transform": "train", "input": "va"},
    {"id": "y3", "kind": "apply", "module": "tr", "input": "x"},
    {"id": "ng", "kind": "transform", "transform": "no_grad", "input": "pr"},
    {"id": "y4", "kind": "apply", "module": "ng", "input": "x"},
    {"id": "fr", "kind": "transform", "transform": "freeze", "input": "pr"},
    {"id": "uf", "kind": "transform", "transform": "unfreeze", "input": "fr"},
    {"id": "y5", "kind": "apply", "module": "uf", "input": "x4"},
    {"id": "w", "kind": "param", "module": "pr", "param": "weight"},
    {"id": "w1", "kind": "param", "module": "p1", "param": "weight"},
    {"id": "wf", "kind": "param", "module": "fr", "param": "weight"},
    {"id": "c", "kind": "op", "op": "mul", "inputs": ["y", "y4"]},
    {"id": "s", "kind": "op", "op": "sum", "inputs": ["c"]},
    {"id": "s1", "kind": "op", "op": "sum", "inputs": ["y1"]},
    {"id": "s3", "kind": "op", "op": "sum", "inputs": ["y3"]},
    {"id": "s5", "kind": "op", "op": "sum", "inputs": ["y5"]},
    {"id": "t", "kind": "op", "op": "add", "inputs": ["s", "s1"]},
    {"id": "t2", "kind": "op", "op": "add", "inputs": ["t", "s3"]},
    {"id": "t3", "kind": "op", "op": "add", "inputs": ["t2", "s5"]},
    {"id": "bw", "kind": "backward", "input": "t3"},
)

# freeze() then train(): burn's BatchNorm stays on its inference path until unfreeze() (record
# batch-norm-freeze-survives-train); then it trains again
BATCH_NORM_FREEZE_TRAIN = _doc(
    BN,
    _leaf("x", [2, 3, 2], [1.0, 2.0, -1.0, 0.5, 3.0, 2.5, 0.0, -2.0, 4.0, 1.0, -0.5, 1.5], rg=True),
    {"id": "fr", "kind": "transform", "transform": "freeze", "input": "bn"},
    {"id": "tr", "kind": "transform", "transform": "train", "input": "fr"},
    {"id": "y", "kind": "apply", "module": "tr", "input": "x"},
    {"id": "m0", "kind": "param", "module": "tr", "param": "running_mean"},
    {"id": "s", "kind": "op", "op": "sum", "inputs": ["y"]},
    {"id": "bw", "kind": "backward", "input": "s"},
    {"id": "uf", "kind": "transform", "transform": "unfreeze", "input": "tr"},
    {"id": "y2", "kind": "apply", "module": "uf", "input": "x"},
    {"id": "m1", "kind": "param", "module": "uf", "param": "running_mean"},
)

MODULE_PROGRAMS: dict[str, Program] = {"batch_norm_transforms": BATCH_NORM_TRANSFORMS, "layer_norm": LAYER_NORM,
                                       "rms_norm": RMS_NORM, "batch_norm_plain_input": BATCH_NORM_PLAIN_INPUT,
                                       "batch_norm_freeze_train": BATCH_NORM_FREEZE_TRAIN,
                                       "group_norm": GROUP_NORM, "conv2d": CONV2D,
                                       "embedding": EMBEDDING, "prelu": PRELU}
