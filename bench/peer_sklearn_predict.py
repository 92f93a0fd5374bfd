#!/usr/bin/python3
"""Peers for the benchmarks, printed as one JSON line:
- pandas.read_csv on lending_club.csv (its C parser), median MB/s, for csv_bench;
- scikit-learn LogisticRegression (same preprocessing as Slipway) scoring one lending-club row,
  median latency in nanoseconds over repeated calls, for predict_bench."""
import os
import json
import sys
import time

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

data = pd.read_csv(sys.argv[1])
target = "Class"
features = data.drop(columns=[target])
numeric = features.select_dtypes("number").columns.tolist()
categorical = [c for c in features.columns if c not in numeric]
model = make_pipeline(
    ColumnTransformer([
        ("numeric", make_pipeline(SimpleImputer(), StandardScaler()), numeric),
        ("categorical", OneHotEncoder(handle_unknown="ignore"), categorical),
    ]),
    LogisticRegression(max_iter=5000),
)
model.fit(features, data[target] == "bad")
row = features.iloc[[0]]
raw_row = model[0].transform(row)
classifier = model[-1]


def median_ns(call, repeats=2000):
    for _ in range(100):
        call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - start)
    return float(np.median(samples))


def read_csv_mb_per_s(path, repeats=20):
    size = os.path.getsize(path)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        pd.read_csv(path)
        samples.append(time.perf_counter() - start)
    return size / float(np.median(samples)) / 1e6


print(json.dumps({
    "pandas_read_csv_lending_mb_per_s": read_csv_mb_per_s(sys.argv[1]),
    "pipeline_one_row_ns": median_ns(lambda: model.predict_proba(row)),
    "classifier_one_row_ns": median_ns(lambda: classifier.predict_proba(raw_row)),
}))
