#!/usr/bin/python3
"""Reference peer for the XGBoost import test (Debian's python3-xgboost).

Usage: xgboost_reference.py DATA.csv TARGET POSITIVE_LABEL|- OBJECTIVE OUT_DIR
Trains XGBoost (hist, depth 6, eta 0.1, 60 rounds, 2 threads) on the numeric columns of DATA.csv
(categories as integer codes, a '-' positive label means a numeric regression target), then writes:
  OUT_DIR/model.json      save_model with feature names
  OUT_DIR/holdout.csv     held-out rows (some values blanked to exercise default directions)
  OUT_DIR/expected.txt    XGBoost's predictions for holdout.csv, one per line
  OUT_DIR/contribs.txt    pred_contribs (TreeSHAP) for the first 300 held-out rows, one row per line
"""
import csv
import os
import sys

import numpy as np
import xgboost as xgb


def main():
    data_path, target, positive, objective, out_dir = sys.argv[1:6]
    with open(data_path, newline="") as handle:
        rows = list(csv.reader(handle))
    header, rows = rows[0], rows[1:]
    features = [name for name in header if name != target and name != "date"]
    columns = {name: [row[i] for row in rows] for i, name in enumerate(header)}

    def as_numbers(values):
        try:
            return np.array([np.nan if v in ("", "NA") else float(v) for v in values], dtype=np.float32)
        except ValueError:
            levels = sorted(set(v for v in values if v not in ("", "NA")))
            code = {level: i for i, level in enumerate(levels)}
            return np.array([np.nan if v in ("", "NA") else code[v] for v in values], dtype=np.float32)

    matrix = np.column_stack([as_numbers(columns[name]) for name in features])
    if positive == "-":
        labels = np.array([float(v) for v in columns[target]], dtype=np.float32)
    else:
        labels = np.array([1.0 if v == positive else 0.0 for v in columns[target]], dtype=np.float32)

    rng = np.random.default_rng(7)
    order = rng.permutation(len(rows))
    holdout, train = order[:2000], order[2000:]
    test_matrix = matrix[holdout].copy()
    test_matrix[rng.random(test_matrix.shape) < 0.05] = np.nan

    booster = xgb.train(
        {"objective": objective, "tree_method": "hist", "max_depth": 6, "eta": 0.1, "nthread": 2, "seed": 1},
        xgb.DMatrix(matrix[train], label=labels[train], feature_names=features),
        num_boost_round=60,
    )
    booster.save_model(os.path.join(out_dir, "model.json"))
    predictions = booster.predict(xgb.DMatrix(test_matrix, feature_names=features))

    with open(os.path.join(out_dir, "holdout.csv"), "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(features + [target])
        for row, label in zip(test_matrix, labels[holdout]):
            writer.writerow(["" if np.isnan(v) else repr(float(v)) for v in row] + [repr(float(label))])
    with open(os.path.join(out_dir, "expected.txt"), "w") as handle:
        for value in predictions:
            handle.write(repr(float(value)) + "\n")
    contribs = booster.predict(xgb.DMatrix(test_matrix[:300], feature_names=features), pred_contribs=True)
    with open(os.path.join(out_dir, "contribs.txt"), "w") as handle:
        for row in contribs:
            handle.write(" ".join(repr(float(v)) for v in row) + "\n")


if __name__ == "__main__":
    main()
