# Writes the MLP of bench/dense_bench.cpp (28 -> 256 -> 256 -> 1, ReLU between, random weights)
# as an ONNX file for ONNX Runtime, the speed peer of the dense kernels. Usage: dense_peer.py OUT.onnx
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(1)
widths = [28, 256, 256, 1]
nodes, initializers = [], []
previous = "x"
for layer in range(3):
    depth, outputs = widths[layer], widths[layer + 1]
    weight = (rng.standard_normal((outputs, depth)) / np.sqrt(depth)).astype(np.float32)
    bias = rng.standard_normal(outputs).astype(np.float32)
    initializers += [numpy_helper.from_array(weight, f"w{layer}"), numpy_helper.from_array(bias, f"b{layer}")]
    gemm = f"gemm{layer}"
    nodes.append(helper.make_node("Gemm", [previous, f"w{layer}", f"b{layer}"], [gemm], transB=1))
    if layer < 2:
        nodes.append(helper.make_node("Relu", [gemm], [f"relu{layer}"]))
        previous = f"relu{layer}"
    else:
        previous = gemm
graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 28])],
                          [helper.make_tensor_value_info(previous, TensorProto.FLOAT, ["batch", 1])], initializers)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1])
