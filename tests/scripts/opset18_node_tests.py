#!/usr/bin/env python3
"""Writes opset-18 forms of the ONNX backend node tests of the ops opset 18 changed.

Debian's ONNX (1.12) stops at opset 17, so its node tests hold no opset-18 models. This takes
the tests of ReduceMax/Min/Mean/Sum, Split, Pad and Resize from DATA (Debian's
libonnx-testdata) and rewrites each model as opset 18 spells it, with the same inputs and
expected outputs: Reduce* `axes` attribute -> an int64 initializer input; Split without a
`split` input -> `num_outputs`; Pad -> an explicit `axes` input over all axes; Resize -> its
`axes` attribute over all axes (the roi/scales/sizes are full-rank already).
onnx_conformance then runs OUT like any node test directory:

    /usr/bin/python3 tests/scripts/opset18_node_tests.py OUT [DATA]
"""
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

REDUCE = ("test_reduce_max", "test_reduce_min", "test_reduce_mean", "test_reduce_sum_")
PREFIXES = REDUCE + ("test_split_", "test_pad", "test_constant_pad", "test_edge_pad",
                     "test_reflect_pad", "test_resize_")


def input_rank(model, name):
    for v in model.graph.input:
        if v.name == name:
            return len(v.type.tensor_type.shape.dim)
    raise KeyError(name)


def take_attribute(node, name):
    for i, a in enumerate(node.attribute):
        if a.name == name:
            del node.attribute[i]
            return helper.get_attribute_value(a)
    return None


def to_opset18(model):
    """The model rewritten as opset 18, or None when it has nothing opset 18 changed."""
    changed = False
    for node in model.graph.node:
        rank = input_rank(model, node.input[0]) if node.input else 0
        if node.op_type in ("ReduceMax", "ReduceMin", "ReduceMean"):
            axes = take_attribute(node, "axes")
            if axes is not None:
                name = node.name + "_axes" if node.name else node.output[0] + "_axes"
                model.graph.initializer.append(
                    numpy_helper.from_array(np.array(axes, np.int64), name))
                node.input.append(name)
            changed = True
        elif node.op_type == "ReduceSum":
            changed = True  # axes became an input at 13 already
        elif node.op_type == "Split":
            if len(node.input) < 2 or not node.input[1]:
                node.attribute.append(helper.make_attribute("num_outputs", len(node.output)))
            changed = True
        elif node.op_type == "Pad":
            while len(node.input) < 3:
                node.input.append("")
            name = node.output[0] + "_axes"
            model.graph.initializer.append(
                numpy_helper.from_array(np.arange(rank, dtype=np.int64), name))
            node.input.append(name)
            changed = True
        elif node.op_type == "Resize":
            node.attribute.append(helper.make_attribute("axes", list(range(rank))))
            changed = True
    if not changed:
        return None
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = 18
    return model


def main():
    out = sys.argv[1]
    data = sys.argv[2] if len(sys.argv) > 2 else "/usr/include/onnx/backend/test/data/node"
    written = 0
    for test in sorted(os.listdir(data)):
        if not test.startswith(PREFIXES):
            continue
        model = onnx.load(os.path.join(data, test, "model.onnx"))
        if any(o.version < 13 for o in model.opset_import if o.domain in ("", "ai.onnx")):
            continue  # an old form (Split's attribute, Pad's pads attribute): not opset 18's
        model = to_opset18(model)
        if model is None:
            continue
        target = os.path.join(out, test + "_opset18")
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(os.path.join(data, test), target)
        onnx.save(model, os.path.join(target, "model.onnx"))
        written += 1
    print(f"{written} opset-18 node tests written to {out}")


if __name__ == "__main__":
    main()
