#!/usr/bin/python3
"""Peer for bench/gbdt_compare.sh: XGBoost (hist, depth 6, eta 0.1, max_bin 255) on the same rows
Slipway trains on. Writes train.csv and test.csv for Slipway and prints, as JSON, XGBoost's test
AUC and its median training time over REPEATS fits (the xgb.train call: binning included).

Data sets:
  lending     data/lending_club.csv, categories as integer codes, a random 2,000-row hold-out by SEED
  synthetic   1,000,000 x 28 generated from SEED: standard normal features, 5% missing, a label drawn
              from a nonlinear logit (interactions, thresholds, a sine); the last 200,000 rows test

Usage: gbdt_peer.py lending|synthetic SEED THREADS ROUNDS REPEATS OUT_DIR
"""
import json
import sys
import time

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.metrics import roc_auc_score

ROOT = __file__.rsplit("/bench/", 1)[0]


def lending(seed):
    frame = pd.read_csv(f"{ROOT}/data/lending_club.csv")
    labels = (frame.pop("Class") == "bad").astype(np.float32).to_numpy()
    for name in frame.columns:
        if frame[name].dtype == object:
            frame[name] = frame[name].astype("category").cat.codes.astype(np.float32)
    matrix = frame.to_numpy(dtype=np.float32)
    order = np.random.default_rng(seed).permutation(len(frame))
    return list(frame.columns), matrix, labels, order[2000:], order[:2000]


def synthetic(seed, rows=1_000_000, width=28):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, width), dtype=np.float32)
    logit = (1.2 * x[:, 0] - 0.8 * x[:, 1] * x[:, 2] + np.where(x[:, 3] > 0.5, 1.0, -0.5) +
             0.6 * np.sin(2 * x[:, 4]) + 0.4 * x[:, 5] ** 2 - 0.3 * np.abs(x[:, 6]) + 0.5 * x[:, 7] * (x[:, 8] > 0))
    labels = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    names = [f"f{i}" for i in range(width)]
    split = rows - 200_000
    return names, x, labels, np.arange(split), np.arange(split, rows)


def main():
    dataset, seed, threads, rounds, repeats, out_dir = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
    names, matrix, labels, train, test = lending(seed) if dataset == "lending" else synthetic(seed)
    params = {"objective": "binary:logistic", "tree_method": "hist", "max_depth": 6, "eta": 0.1, "max_bin": 255,
              "nthread": threads}
    train_matrix = xgb.DMatrix(matrix[train], label=labels[train])
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        booster = xgb.train(params, train_matrix, rounds)
        times.append(time.perf_counter() - start)
    auc = roc_auc_score(labels[test], booster.predict(xgb.DMatrix(matrix[test])))
    for name, indices in (("train", train), ("test", test)):
        frame = pd.DataFrame(matrix[indices], columns=names)
        frame["label"] = labels[indices].astype(np.int32)
        frame.to_csv(f"{out_dir}/{name}.csv", index=False, float_format="%.9g", na_rep="")
    print(json.dumps({"auc": float(auc), "train_seconds": float(np.median(times))}))


if __name__ == "__main__":
    main()
