#!/usr/bin/python3
"""Peer for bench/gbdt_compare.sh: XGBoost (hist, depth 6, eta 0.1, 200 rounds) on lending_club.csv
with categories as integer codes, on a random 2,000-row hold-out chosen by SEED. Writes the same
train and test rows as CSV for Slipway and prints XGBoost's test AUC and median training time.

Usage: gbdt_peer.py DATA.csv SEED THREADS OUT_DIR
"""
import csv
import json
import sys
import time

import numpy as np
import xgboost as xgb
from sklearn.metrics import roc_auc_score

data_path, seed, threads, out_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = list(csv.reader(open(data_path, newline="")))
header, rows = rows[0], rows[1:]
target = "Class"
features = [name for name in header if name != target]
columns = {name: [row[i] for row in rows] for i, name in enumerate(header)}


def as_numbers(values):
    try:
        return np.array([np.nan if v in ("", "NA") else float(v) for v in values], dtype=np.float32)
    except ValueError:
        levels = sorted(set(v for v in values if v not in ("", "NA")))
        code = {level: i for i, level in enumerate(levels)}
        return np.array([np.nan if v in ("", "NA") else code[v] for v in values], dtype=np.float32)


matrix = np.column_stack([as_numbers(columns[name]) for name in features])
labels = np.array([1.0 if v == "bad" else 0.0 for v in columns[target]])
order = np.random.default_rng(seed).permutation(len(rows))
test, train = order[:2000], order[2000:]
params = {"objective": "binary:logistic", "tree_method": "hist", "max_depth": 6, "eta": 0.1, "nthread": threads}
train_matrix = xgb.DMatrix(matrix[train], label=labels[train])
times = []
for _ in range(3):
    start = time.perf_counter()
    booster = xgb.train(params, train_matrix, 200)
    times.append(time.perf_counter() - start)
auc = roc_auc_score(labels[test], booster.predict(xgb.DMatrix(matrix[test])))
for name, indices in (("train", train), ("test", test)):
    with open(f"{out_dir}/{name}.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(features + [target])
        for i in indices:
            writer.writerow(["" if np.isnan(v) else repr(float(v)) for v in matrix[i]] + [int(labels[i])])
print(json.dumps({"auc": auc, "train_seconds": float(np.median(times))}))
