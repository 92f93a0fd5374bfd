"""Models out of Slipway, checked by other runtimes: every exported ONNX file passes onnx.checker
and predicts what `slipway predict` does under an independent numpy evaluator (onnx_reference.py)
and, when Node.js and onnxruntime-node are present, under ONNX Runtime; every exported XGBoost
JSON file, loaded by python3-xgboost, predicts the same.

Usage: check_exports.py --slipway BIN --home DIR --data DIR [--ort-modules DIR]
Exit status 0 when every check passes; prints one line per check.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pandas as pd
import xgboost

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_reference  # noqa: E402

TOLERANCE = 1e-5  # relative to max(1, |score|); predict prints scores with 7 significant digits
failures = []


def slipway(args, home, binary):
    result = subprocess.run([binary, "--home", home, "--json"] + args, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"slipway {' '.join(args)} failed: {result.stderr}")
    return json.loads(result.stdout) if result.stdout.strip().startswith("{") else None


def synthetic_multiclass(path):
    """Three classes by region of three numbers, with missing values in one of them."""
    rng = random.Random(1)
    with open(path, "w") as out:
        out.write("x1,x2,x3,kind\n")
        for row in range(800):
            a, b, c = rng.uniform(-1, 1), rng.uniform(-1, 1), rng.uniform(0, 5)
            kind = "alpha" if a < -0.2 else ("beta" if b < 0.3 else "gamma")
            b_text = "" if row % 17 == 0 else f"{b:.4f}"
            out.write(f"{a:.4f},{b_text},{c:.3f},{kind}\n")


def encode(column, levels):
    """A text column as the bundle's category codes: level i is i; missing and unseen values are len(levels)."""
    return column.map({level: i for i, level in enumerate(levels)}).fillna(len(levels)).to_numpy(dtype=np.float32)


def predicted_scores(csv_path):
    frame = pd.read_csv(csv_path)
    columns = [c for c in frame.columns if c == "prediction" or c.startswith("probability")]
    return frame[columns].to_numpy(dtype=np.float64)


def compare(name, expected, actual):
    actual = np.asarray(actual, dtype=np.float64).reshape(expected.shape)
    error = np.max(np.abs(actual - expected) / np.maximum(1.0, np.abs(expected)))
    ok = bool(error <= TOLERANCE)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: largest relative difference {error:.2e}")
    if not ok:
        failures.append(name)


def ort_scores(model_path, feeds, modules, work):
    inputs = {name: {"dims": list(value.shape), "data": [None if np.isnan(x) else float(x) for x in value.ravel()]}
              for name, value in feeds.items()}
    inputs_path = os.path.join(work, "ort_inputs.json")
    with open(inputs_path, "w") as out:
        json.dump(inputs, out)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort_predict.js")
    result = subprocess.run(["node", script, model_path, inputs_path], capture_output=True, text=True,
                            env=dict(os.environ, NODE_PATH=modules))
    if result.returncode != 0:
        raise RuntimeError(f"ONNX Runtime failed on {model_path}: {result.stderr}")
    scores = json.loads(result.stdout)["scores"]
    return np.array([np.nan if x is None else x for x in scores["data"]]).reshape(scores["dims"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--slipway", required=True)
    parser.add_argument("--home", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--ort-modules", default=os.path.expanduser("~/.cache/slipway-peers/node_modules"))
    options = parser.parse_args()
    home, binary = options.home, options.slipway
    work = os.path.join(home, "exports")
    os.makedirs(work, exist_ok=True)
    multiclass_path = os.path.join(work, "multiclass.csv")
    synthetic_multiclass(multiclass_path)
    with_ort = shutil.which("node") is not None and os.path.isdir(os.path.join(options.ort_modules, "onnxruntime-node"))
    if shutil.which("node") and shutil.which("npm") and not with_ort:
        # Its install script fetches GPU extras from a host that may be unreachable: skip it.
        prefix = os.path.dirname(options.ort_modules)
        os.makedirs(prefix, exist_ok=True)
        try:
            installed = subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund",
                                        "--fetch-timeout=20000", "--fetch-retries=1", "onnxruntime-node@1.30.0"],
                                       cwd=prefix, capture_output=True, text=True, timeout=180)
            with_ort = installed.returncode == 0
            if not with_ort:
                print("npm could not install onnxruntime-node: " + installed.stderr.strip()[-300:])
        except subprocess.TimeoutExpired:
            print("npm did not install onnxruntime-node within 3 minutes: ONNX Runtime checks skipped")
    print("ONNX Runtime: " + ("onnxruntime-node from " + options.ort_modules if with_ort else "not present, skipped"))

    slipway(["init"], home, binary)
    chicago = os.path.join(options.data, "chicago_ridership.csv")
    lending = os.path.join(options.data, "lending_club.csv")
    cases = [
        # name, data, target, extra train arguments
        ("gbdt-regression", chicago, "ridership", ["--model", "gbdt", "--ignore", "date", "--param", "rounds=30"]),
        ("gbdt-binary-categorical", lending, "Class", ["--model", "gbdt", "--param", "rounds=30"]),
        ("gbdt-multiclass-missing", multiclass_path, "kind", ["--model", "gbdt", "--param", "rounds=20"]),
        ("mlp-regression-layernorm-gelu", chicago, "ridership",
         ["--model", "mlp", "--ignore", "date", "--param", "layer_norm=true", "--param", "activation=gelu",
          "--param", "epochs=5"]),
        ("mlp-multiclass-tanh-missing", multiclass_path, "kind",
         ["--model", "mlp", "--param", "activation=gelu_tanh", "--param", "hidden_units=32,16", "--param",
          "epochs=10"]),
        ("mlp-binary-categorical", lending, "Class", ["--model", "mlp", "--param", "epochs=3"]),
    ]
    for name, data_path, target, arguments in cases:
        slipway(["train", "--data", data_path, "--target", target, "--register", name, "--no-progress"] + arguments,
                home, binary)
        predictions = os.path.join(work, name + ".csv")
        slipway(["predict", name, "--data", data_path, "--out", predictions], home, binary)
        expected = predicted_scores(predictions)
        frame = pd.read_csv(data_path)

        onnx_path = os.path.join(work, name + ".onnx")
        exported = slipway(["export", name, "--format", "onnx", "--out", onnx_path], home, binary)
        model = onnx.load(onnx_path)
        onnx.checker.check_model(model, full_check=True)
        input_name = model.graph.input[0].name
        codes = exported["category_codes"]
        if input_name == "input":
            columns = [c for c in frame.columns if c not in (target, "date")]
            matrix = frame[columns].to_numpy(dtype=np.float32)
        elif name.startswith("gbdt"):
            # Trees take categories as their codes (level i is code i, the rest the level count).
            columns = [c for c in frame.columns if c != target]
            matrix = np.stack([encode(frame[c], codes[c]) if c in codes else frame[c].to_numpy(dtype=np.float32)
                               for c in columns], axis=1)
        else:
            matrix = None  # a one-hot MLP's preprocessed matrix: checked by the checker and ORT's load only
        rows = slice(0, 300)
        if matrix is not None:
            feeds = {input_name: matrix[rows]}
            compare(f"{name} onnx (numpy evaluator)", expected[rows],
                    onnx_reference.run(model, feeds)["scores"])
            if with_ort:
                compare(f"{name} onnx (ONNX Runtime)", expected[rows], ort_scores(onnx_path, feeds,
                                                                                 options.ort_modules, work))
        elif with_ort:
            width = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
            scores = ort_scores(onnx_path, {input_name: np.zeros((4, width), dtype=np.float32)}, options.ort_modules,
                                work)
            ok = scores.shape == (4, 1) and np.all((scores >= 0) & (scores <= 1))
            print(f"{'ok  ' if ok else 'FAIL'} {name} onnx loads and runs in ONNX Runtime")
            if not ok:
                failures.append(name + " ORT")

        if matrix is not None and name.startswith("mlp"):
            # Out and back in: our own ONNX file imports to the same predictions.
            schema = os.path.join(work, name + ".schema.csv")
            pd.DataFrame(columns=[c for c in frame.columns if c not in (target, "date")]).to_csv(schema, index=False)
            slipway(["import", "onnx", onnx_path, "--schema", schema, "--register", name + "-back"], home, binary)
            back = os.path.join(work, name + ".back.csv")
            slipway(["predict", name + "-back", "--data", data_path, "--out", back], home, binary)
            compare(f"{name} onnx exported and imported again", expected, predicted_scores(back))

        if name.startswith("gbdt"):
            json_path = os.path.join(work, name + ".json")
            slipway(["export", name, "--format", "xgboost-json", "--out", json_path], home, binary)
            booster = xgboost.Booster()
            booster.load_model(json_path)
            table = pd.DataFrame({c: encode(frame[c], codes[c]) if c in codes else frame[c].astype("float32")
                                  for c in booster.feature_names})
            matrix = xgboost.DMatrix(table, feature_types=booster.feature_types, enable_categorical=True)
            scores = booster.predict(matrix)
            compare(f"{name} xgboost-json (python3-xgboost {xgboost.__version__})", expected,
                    scores.reshape(expected.shape))
    if failures:
        print(f"{len(failures)} checks failed: {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
