"""An independent ONNX evaluator in numpy for the operators Slipway exports and imports.

Debian's python3-onnx 1.12 has no reference evaluator, so the export tests run graphs here: each
operator written from the ONNX operator documentation, not from Slipway's code.
"""
import math

import numpy as np
from onnx import numpy_helper

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _attributes(node):
    out = {}
    for attribute in node.attribute:
        kind = attribute.type
        if kind == attribute.FLOAT:
            out[attribute.name] = attribute.f
        elif kind == attribute.INT:
            out[attribute.name] = attribute.i
        elif kind == attribute.STRING:
            out[attribute.name] = attribute.s.decode()
        elif kind == attribute.FLOATS:
            out[attribute.name] = list(attribute.floats)
        elif kind == attribute.INTS:
            out[attribute.name] = list(attribute.ints)
        elif kind == attribute.STRINGS:
            out[attribute.name] = [s.decode() for s in attribute.strings]
        elif kind == attribute.TENSOR:
            out[attribute.name] = numpy_helper.to_array(attribute.t)
    return out


def _tree_ensemble_regressor(x, a):
    """ai.onnx.ml TreeEnsembleRegressor: sum of leaf weights per target plus base_values."""
    rows = x.shape[0]
    targets = a.get("n_targets", 1)
    nodes = {}
    for i, (tree, node) in enumerate(zip(a["nodes_treeids"], a["nodes_nodeids"])):
        nodes[(tree, node)] = i
    leaves = {}
    for tree, node, target, weight in zip(a["target_treeids"], a["target_nodeids"], a["target_ids"],
                                          a["target_weights"]):
        leaves.setdefault((tree, node), []).append((target, weight))
    missing_true = a.get("nodes_missing_value_tracks_true", [0] * len(a["nodes_nodeids"]))
    out = np.zeros((rows, targets), dtype=np.float64)
    for row in range(rows):
        for tree in sorted(set(a["nodes_treeids"])):
            i = nodes[(tree, 0)]
            while a["nodes_modes"][i] != "LEAF":
                value = x[row, a["nodes_featureids"][i]]
                threshold = np.float32(a["nodes_values"][i])
                mode = a["nodes_modes"][i]
                if np.isnan(value):
                    take_true = missing_true[i] == 1
                elif mode == "BRANCH_LT":
                    take_true = value < threshold
                elif mode == "BRANCH_LEQ":
                    take_true = value <= threshold
                elif mode == "BRANCH_GT":
                    take_true = value > threshold
                elif mode == "BRANCH_GTE":
                    take_true = value >= threshold
                elif mode == "BRANCH_EQ":
                    take_true = value == threshold
                else:
                    take_true = value != threshold
                following = a["nodes_truenodeids"][i] if take_true else a["nodes_falsenodeids"][i]
                i = nodes[(tree, following)]
            for target, weight in leaves[(tree, a["nodes_nodeids"][i])]:
                out[row, target] += weight
    base = a.get("base_values")
    if base:
        out += np.asarray(base, dtype=np.float64)
    assert a.get("post_transform", "NONE") == "NONE", "only post_transform NONE is implemented here"
    return out.astype(np.float32)


def _layer_norm(x, scale, bias, a):
    axis = a.get("axis", -1)
    mean = x.mean(axis=axis, keepdims=True, dtype=np.float64)
    variance = ((x - mean) ** 2).mean(axis=axis, keepdims=True)
    y = (x - mean) / np.sqrt(variance + a.get("epsilon", 1e-5)) * scale
    return (y + bias if bias is not None else y).astype(np.float32)


def _softmax(x, a):
    axis = a.get("axis", -1)
    shifted = x - x.max(axis=axis, keepdims=True)
    e = np.exp(shifted.astype(np.float64))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)


def run(model, feeds):
    """Evaluates `model` (an onnx.ModelProto) on `feeds` {name: array}; returns {output name: array}."""
    values = dict(feeds)
    for initializer in model.graph.initializer:
        values[initializer.name] = numpy_helper.to_array(initializer)
    for node in model.graph.node:
        a = _attributes(node)
        x = [values[name] if name else None for name in node.input]
        op = node.op_type
        if op == "Gemm":
            left = x[0].T if a.get("transA", 0) else x[0]
            right = x[1].T if a.get("transB", 0) else x[1]
            y = a.get("alpha", 1.0) * (left.astype(np.float64) @ right.astype(np.float64))
            if len(x) > 2 and x[2] is not None:
                y = y + a.get("beta", 1.0) * x[2]
        elif op == "MatMul":
            y = x[0].astype(np.float64) @ x[1].astype(np.float64)
        elif op == "Add":
            y = x[0] + x[1]
        elif op == "Sub":
            y = x[0] - x[1]
        elif op == "Mul":
            y = x[0] * x[1]
        elif op == "Div":
            y = x[0] / x[1]
        elif op == "Relu":
            y = np.maximum(x[0], 0)
        elif op == "Sigmoid":
            y = 1.0 / (1.0 + np.exp(-x[0].astype(np.float64)))
        elif op == "Tanh":
            y = np.tanh(x[0])
        elif op == "Erf":
            y = _erf(x[0])
        elif op == "Gelu":
            if a.get("approximate", "none") == "tanh":
                y = 0.5 * x[0] * (1 + np.tanh(math.sqrt(2 / math.pi) * (x[0] + 0.044715 * x[0] ** 3)))
            else:
                y = 0.5 * x[0] * (1 + _erf(x[0] / math.sqrt(2)))
        elif op == "Softmax":
            y = _softmax(x[0], a)
        elif op == "LayerNormalization":
            y = _layer_norm(x[0], x[1], x[2] if len(x) > 2 else None, a)
        elif op == "IsNaN":
            y = np.isnan(x[0])
        elif op == "Where":
            y = np.where(x[0], x[1], x[2])
        elif op in ("Identity", "Cast"):
            y = x[0]
        elif op == "Flatten":
            axis = a.get("axis", 1)
            y = x[0].reshape(int(np.prod(x[0].shape[:axis])), -1)
        elif op == "TreeEnsembleRegressor":
            y = _tree_ensemble_regressor(x[0], a)
        else:
            raise NotImplementedError(f"operator {op} is not in the reference evaluator")
        if not isinstance(y, np.ndarray) or y.dtype != np.bool_:
            y = np.asarray(y, dtype=np.float32)
        values[node.output[0]] = y
    return {output.name: values[output.name] for output in model.graph.output}
