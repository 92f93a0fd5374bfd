#!/usr/bin/python3
"""Reference peer for the XGBoost import test (Debian's python3-xgboost).

Usage: xgboost_reference.py DATA.csv TARGET POSITIVE_LABEL|-|@classes OBJECTIVE OUT_DIR [categorical]
Trains XGBoost (hist, depth 6, eta 0.1, 60 rounds, 2 threads) on the columns of DATA.csv (text
columns as integer codes of their sorted levels). The positive label '-' means a numeric regression
target, '@classes' a multiclass target (the class index of each sorted level). With 'categorical',
text columns are XGBoost categorical features (enable_categorical: partition splits on the codes).
Writes:
  OUT_DIR/model.json      save_model with feature names
  OUT_DIR/holdout.csv     held-out rows (some values blanked to exercise default directions)
  OUT_DIR/expected.txt    XGBoost's predictions for holdout.csv, one row per line (one value per class)
  OUT_DIR/contribs.txt    pred_contribs (TreeSHAP) for the first 300 held-out rows, one row per line
                          (multiclass: the classes' blocks one after another)
"""
import csv
import os
import sys

import numpy as np
import xgboost as xgb


def main():
    data_path, target, positive, objective, out_dir = sys.argv[1:6]
    categorical = len(sys.argv) > 6 and sys.argv[6] == "categorical"
    with open(data_path, newline="") as handle:
        rows = list(csv.reader(handle))
    header, rows = rows[0], rows[1:]
    features = [name for name in header if name != target and name != "date"]
    columns = {name: [row[i] for row in rows] for i, name in enumerate(header)}

    text_columns = set()

    def as_numbers(name):
        values = columns[name]
        try:
            return np.array([np.nan if v in ("", "NA") else float(v) for v in values], dtype=np.float32)
        except ValueError:
            text_columns.add(name)
            levels = sorted(set(v for v in values if v not in ("", "NA")))
            code = {level: i for i, level in enumerate(levels)}
            return np.array([np.nan if v in ("", "NA") else code[v] for v in values], dtype=np.float32)

    matrix = np.column_stack([as_numbers(name) for name in features])
    feature_types = ["c" if categorical and name in text_columns else "q" for name in features]
    if positive == "@classes":
        levels = sorted(set(columns[target]))
        labels = np.array([levels.index(v) for v in columns[target]], dtype=np.float32)
    elif positive == "-":
        labels = np.array([float(v) for v in columns[target]], dtype=np.float32)
    else:
        labels = np.array([1.0 if v == positive else 0.0 for v in columns[target]], dtype=np.float32)

    rng = np.random.default_rng(7)
    order = rng.permutation(len(rows))
    holdout, train = order[:2000], order[2000:]
    test_matrix = matrix[holdout].copy()
    test_matrix[rng.random(test_matrix.shape) < 0.05] = np.nan

    params = {"objective": objective, "tree_method": "hist", "max_depth": 6, "eta": 0.1, "nthread": 2, "seed": 1}
    if positive == "@classes":
        params["num_class"] = len(set(labels.tolist()))
    if categorical:
        params["max_cat_to_onehot"] = 1  # partition splits, not one-hot

    def dmatrix(values, label=None):
        return xgb.DMatrix(values, label=label, feature_names=features, feature_types=feature_types,
                           enable_categorical=categorical)

    booster = xgb.train(params, dmatrix(matrix[train], labels[train]), num_boost_round=60)
    booster.save_model(os.path.join(out_dir, "model.json"))
    predictions = booster.predict(dmatrix(test_matrix))

    with open(os.path.join(out_dir, "holdout.csv"), "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(features + [target])
        for row, label in zip(test_matrix, labels[holdout]):
            writer.writerow(["" if np.isnan(v) else repr(float(v)) for v in row] + [repr(float(label))])
    with open(os.path.join(out_dir, "expected.txt"), "w") as handle:
        for value in predictions:
            handle.write(" ".join(repr(float(v)) for v in np.atleast_1d(value)) + "\n")
    contribs = booster.predict(dmatrix(test_matrix[:300]), pred_contribs=True)
    with open(os.path.join(out_dir, "contribs.txt"), "w") as handle:
        for row in contribs:
            handle.write(" ".join(repr(float(v)) for v in np.ravel(row)) + "\n")


if __name__ == "__main__":
    main()
