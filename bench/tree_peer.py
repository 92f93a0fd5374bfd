#!/usr/bin/python3
"""Peer for tree_bench: trains XGBoost (hist, 200 trees, depth 8) on a deterministic synthetic binary
task (28 features, 5% missing), saves the model and 100,000 held-out rows for Slipway, and measures
XGBoost's own prediction speed on them. Prints one JSON line.

Usage: tree_peer.py OUT_DIR
"""
import json
import os
import sys
import time

import numpy as np
import xgboost as xgb

out_dir = sys.argv[1]
rng = np.random.default_rng(42)
features = 28
weights = rng.normal(size=features)


def make(rows):
    x = rng.normal(size=(rows, features)).astype(np.float32)
    margin = x @ weights + 0.5 * np.sin(3 * x[:, 0]) * x[:, 1] + (x[:, 2] > 0.3) * x[:, 3]
    y = (margin + rng.normal(scale=1.0, size=rows) > 0).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    return x, y


train_x, train_y = make(200_000)
test_x, _ = make(100_000)
booster = xgb.train({"objective": "binary:logistic", "tree_method": "hist", "max_depth": 8, "eta": 0.1,
                     "nthread": 2, "seed": 1}, xgb.DMatrix(train_x, label=train_y), num_boost_round=200)
booster.save_model(os.path.join(out_dir, "model.json"))
test_x.astype("<f4").tofile(os.path.join(out_dir, "rows.f32"))
expected = booster.inplace_predict(test_x)
expected.astype("<f4").tofile(os.path.join(out_dir, "expected.f32"))


def median_seconds(call, repeats):
    call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples)), samples


result = {"rows": int(test_x.shape[0]), "features": features, "trees": 200}
for threads in (1, 2):
    booster.set_param({"nthread": threads})
    seconds, _ = median_seconds(lambda: booster.inplace_predict(test_x), 5)
    result[f"batch_rows_per_s_{threads}t"] = test_x.shape[0] / seconds
booster.set_param({"nthread": 1})
one_row = test_x[:1]
_, samples = median_seconds(lambda: booster.inplace_predict(one_row), 2000)
result["single_row_median_us"] = float(np.median(samples)) * 1e6
result["single_row_p99_us"] = float(np.percentile(samples, 99)) * 1e6
print(json.dumps(result))
