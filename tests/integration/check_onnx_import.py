"""MLPs exported by PyTorch (Debian's python3-torch, torch.onnx.export at opset 17), imported with
`slipway import onnx`, must predict what PyTorch predicts within 1e-5; what Slipway cannot import
is refused naming the operator.

Usage: check_onnx_import.py --slipway BIN --home DIR --data DIR
Exit status 0 when every check passes; prints one line per check.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import torch

TOLERANCE = 1e-5  # relative to max(1, |prediction|)
failures = []


class Standardize(torch.nn.Module):
    """(x - mean) / std inside the graph: Sub and Div nodes before the first layer."""

    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32))

    def forward(self, x):
        return (x - self.mean) / self.std


def slipway(binary, home, args, check=True):
    result = subprocess.run([binary, "--home", home] + args, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"slipway {' '.join(args)} failed: {result.stderr}")
    return result


def check(name, binary, home, work, model, rows, columns, labels=None, shape=None):
    """Exports `model`, imports it, scores `rows` with slipway and compares with PyTorch. `shape`
    (after the rows) is the tensor PyTorch takes, flattened by the model's first layer."""
    model.eval()
    path = os.path.join(work, name + ".onnx")
    tensor = torch.tensor(rows, dtype=torch.float32)
    if shape:
        tensor = tensor.reshape((len(rows),) + shape)
    torch.onnx.export(model, tensor[:2], path, input_names=["x"], output_names=["y"], opset_version=17,
                      dynamic_axes={"x": {0: "rows"}, "y": {0: "rows"}})
    with torch.no_grad():
        expected = model(tensor).numpy().astype(np.float64)
    data_path = os.path.join(work, name + ".csv")
    pd.DataFrame(rows, columns=columns).to_csv(data_path, index=False, float_format="%.9g")
    arguments = ["import", "onnx", path, "--schema", data_path, "--register", name]
    if labels:
        arguments += ["--labels", ",".join(labels)]
    slipway(binary, home, arguments)
    scored = os.path.join(work, name + ".scores.csv")
    slipway(binary, home, ["predict", name, "--data", data_path, "--out", scored])
    frame = pd.read_csv(scored)
    got = frame[[c for c in frame.columns if c == "prediction" or c.startswith("probability")]].to_numpy(np.float64)
    if expected.shape[1] == 1 and got.shape[1] == 1:
        pass
    error = np.max(np.abs(got - expected.reshape(got.shape)) / np.maximum(1.0, np.abs(expected.reshape(got.shape))))
    ok = bool(error <= TOLERANCE)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: largest relative difference from PyTorch {error:.2e}")
    if not ok:
        failures.append(name)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--slipway", required=True)
    parser.add_argument("--home", required=True)
    parser.add_argument("--data", required=True)
    options = parser.parse_args()
    binary, home = options.slipway, options.home
    work = os.path.join(home, "onnx_import")
    os.makedirs(work, exist_ok=True)
    slipway(binary, home, ["init"])
    torch.manual_seed(0)

    chicago = pd.read_csv(os.path.join(options.data, "chicago_ridership.csv")).drop(columns=["date", "ridership"])
    rows = chicago.to_numpy(np.float32)[:400]
    width = rows.shape[1]
    regression = torch.nn.Sequential(
        Standardize(rows.mean(axis=0), rows.std(axis=0) + 1e-3),
        torch.nn.Linear(width, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 32), torch.nn.GELU(),
        torch.nn.Linear(32, 1))
    check("torch-regression-standardize-gelu", binary, home, work, regression, rows, list(chicago.columns))

    lending = pd.read_csv(os.path.join(options.data, "lending_club.csv"))
    numeric = lending.select_dtypes("number")
    rows = ((numeric - numeric.mean()) / (numeric.std() + 1e-6)).to_numpy(np.float32)[:400]
    binary_model = torch.nn.Sequential(
        torch.nn.Linear(rows.shape[1], 48), torch.nn.LayerNorm(48), torch.nn.GELU(approximate="tanh"),
        torch.nn.Dropout(0.3),
        torch.nn.Linear(48, 16), torch.nn.Tanh(),
        torch.nn.Linear(16, 1), torch.nn.Sigmoid())
    check("torch-binary-layernorm-gelu-tanh", binary, home, work, binary_model, rows, list(numeric.columns))

    generator = np.random.default_rng(3)
    rows = generator.standard_normal((300, 10)).astype(np.float32)
    multiclass = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(10, 24), torch.nn.Sigmoid(),
        torch.nn.Linear(24, 4), torch.nn.Softmax(dim=1))
    check("torch-multiclass-softmax", binary, home, work, multiclass, rows, [f"x{i}" for i in range(10)],
          labels=["north", "east", "south", "west"])

    images = generator.standard_normal((200, 12)).astype(np.float32)
    flattening = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    check("torch-flatten-3x4", binary, home, work, flattening, images, [f"p{i}" for i in range(12)], shape=(1, 3, 4))

    # An operator outside the MLP subset is named in the refusal.
    unsupported = torch.nn.Sequential(torch.nn.Linear(10, 3), torch.nn.LogSoftmax(dim=1))
    path = os.path.join(work, "logsoftmax.onnx")
    torch.onnx.export(unsupported.eval(), torch.zeros(2, 10), path, opset_version=17)
    refused = slipway(binary, home, ["import", "onnx", path], check=False)
    ok = refused.returncode == 1 and "operator 'LogSoftmax'" in refused.stderr and "is not supported" in refused.stderr
    print(f"{'ok  ' if ok else 'FAIL'} an unsupported operator is named: {refused.stderr.strip()}")
    if not ok:
        failures.append("unsupported operator")
    convolution = torch.nn.Sequential(torch.nn.Conv1d(1, 2, 3), torch.nn.Flatten(), torch.nn.Linear(16, 1))
    path = os.path.join(work, "conv.onnx")
    torch.onnx.export(convolution.eval(), torch.zeros(2, 1, 10), path, opset_version=17)
    refused = slipway(binary, home, ["import", "onnx", path], check=False)
    ok = refused.returncode == 1 and "dimensions; an MLP takes a matrix" in refused.stderr
    print(f"{'ok  ' if ok else 'FAIL'} a Conv1d model (3-D input) is refused: {refused.stderr.strip()}")
    if not ok:
        failures.append("conv refusal")
    hostile_files(binary, home, work)
    if failures:
        print(f"{len(failures)} checks failed: {', '.join(failures)}")
        return 1
    return 0


def hostile_files(binary, home, work):
    """Malformed and out-of-subset graphs: each refused with one error line and exit status 1."""
    from onnx import TensorProto, helper, numpy_helper

    def graph_model(nodes, initializers, inputs=None, width=4, outputs=("y",)):
        inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", width])]
        graph = helper.make_graph(nodes, "hostile", inputs,
                                  [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["rows", 1]) for o in outputs],
                                  initializers)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    weights = numpy_helper.from_array(np.ones((1, 4), dtype=np.float32), "w")
    bias = numpy_helper.from_array(np.zeros(1, dtype=np.float32), "b")
    empty = helper.make_tensor("w", TensorProto.FLOAT, [0, 1 << 40], [])
    cases = {
        "no outputs": graph_model([helper.make_node("Gemm", ["x", "w", "b"], [], transB=1)], [weights, bias]),
        "empty weights": graph_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [empty]),
        "huge width": graph_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], [weights, bias],
                                  width=1 << 40),
        "transA": graph_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transA=1, transB=1)],
                              [weights, bias]),
        "cast to int64": graph_model([helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
                                      helper.make_node("Cast", ["g"], ["y"], to=TensorProto.INT64)], [weights, bias]),
        "branch": graph_model([helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
                               helper.make_node("Relu", ["g"], ["r"]),
                               helper.make_node("Add", ["g", "r"], ["y"])], [weights, bias]),
        "layer norm after activation": graph_model(
            [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1), helper.make_node("Relu", ["g"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "s"], ["y"])],
            [weights, bias, numpy_helper.from_array(np.ones(1, dtype=np.float32), "s")]),
        "two inputs": graph_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], [weights, bias],
                                  inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 4]),
                                          helper.make_tensor_value_info("z", TensorProto.FLOAT, ["rows", 4])]),
        "weights as input": graph_model([helper.make_node("Gemm", ["x", "v", "b"], ["y"], transB=1)], [bias]),
    }
    for name, model in cases.items():
        path = os.path.join(work, "hostile.onnx")
        with open(path, "wb") as out:
            out.write(model.SerializeToString())
        refused = slipway(binary, home, ["import", "onnx", path], check=False)
        lines = refused.stderr.strip().splitlines()
        ok = refused.returncode == 1 and len(lines) >= 1 and lines[-1].startswith("error: ")
        print(f"{'ok  ' if ok else 'FAIL'} hostile ONNX file ({name}) refused: {lines[-1] if lines else refused.returncode}")
        if not ok:
            failures.append("hostile " + name)
    for name, data in {"empty file": b"", "random bytes": bytes(range(256)) * 4, "text": b"not onnx at all\n"}.items():
        path = os.path.join(work, "junk.onnx")
        with open(path, "wb") as out:
            out.write(data)
        refused = slipway(binary, home, ["import", "onnx", path], check=False)
        ok = refused.returncode == 1 and "error: " in refused.stderr
        print(f"{'ok  ' if ok else 'FAIL'} {name} refused: {refused.stderr.strip().splitlines()[-1:]}")
        if not ok:
            failures.append(name)


if __name__ == "__main__":
    sys.exit(main())
