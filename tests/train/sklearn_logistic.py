#!/usr/bin/python3
"""Reference peer for the logistic-regression parity test.

Usage: sklearn_logistic.py DATA.csv TARGET POSITIVE_LABEL TEST_ROWS.txt
Fits scikit-learn's LogisticRegression (C=1, lbfgs) with the preprocessing Slipway uses
(mean imputation and standardization for numbers, one-hot for categories) on every row not
listed in TEST_ROWS.txt (0-based data row indices, one per line) and prints the test AUC.
"""
import csv
import sys

import numpy as np
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler


def is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def main():
    data_path, target, positive, test_rows_path = sys.argv[1:5]
    with open(data_path, newline="") as handle:
        rows = list(csv.reader(handle))
    header, rows = rows[0], rows[1:]
    missing = {"", "NA"}
    columns = {name: [row[i] for row in rows] for i, name in enumerate(header)}
    features = [name for name in header if name != target]
    numeric = [name for name in features if all(v in missing or is_number(v) for v in columns[name])]
    categorical = [name for name in features if name not in numeric]

    matrix = np.empty((len(rows), len(features)), dtype=object)
    for j, name in enumerate(features):
        for i, value in enumerate(columns[name]):
            if name in numeric:
                matrix[i, j] = np.nan if value in missing else float(value)
            else:
                matrix[i, j] = "__missing__" if value in missing else value
    labels = np.array([1 if value == positive else 0 for value in columns[target]])

    with open(test_rows_path) as handle:
        test_rows = sorted(int(line) for line in handle if line.strip())
    is_test = np.zeros(len(rows), dtype=bool)
    is_test[test_rows] = True

    numeric_index = [features.index(name) for name in numeric]
    categorical_index = [features.index(name) for name in categorical]
    model = make_pipeline(
        ColumnTransformer([
            ("numeric", make_pipeline(SimpleImputer(strategy="mean"), StandardScaler()), numeric_index),
            ("categorical", OneHotEncoder(handle_unknown="ignore"), categorical_index),
        ]),
        LogisticRegression(C=1.0, max_iter=5000),
    )
    model.fit(matrix[~is_test], labels[~is_test])
    scores = model.predict_proba(matrix[is_test])[:, 1]
    print(f"{roc_auc_score(labels[is_test], scores):.6f}")


if __name__ == "__main__":
    main()
