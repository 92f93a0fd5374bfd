"""XGBoost 1.7 and scikit-learn's HistGradientBoosting with their default parameters (Debian's
python3-xgboost and python3-sklearn), fitted on the training file bench/automl_defaults.sh gives
`slipway tune --auto`, scored on its held-out test file by the same metric.

Usage: /usr/bin/python3 bench/automl_peer.py TRAIN VALID TEST TARGET auc|rmse [IGNORED_COLUMN ...]
Text columns become category codes (one mapping over all three files). Prints one line:
"xgboost METRIC hist_gradient_boosting METRIC".
"""
import sys

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.metrics import mean_squared_error, roc_auc_score


def main():
    train_path, valid_path, test_path, target, metric = sys.argv[1:6]
    ignored = sys.argv[6:]
    frames = [pd.read_csv(path) for path in (train_path, valid_path, test_path)]
    sizes = [len(frame) for frame in frames]
    whole = pd.concat(frames, ignore_index=True).drop(columns=ignored)
    labels = whole.pop(target)
    for name in whole.columns:
        if whole[name].dtype == object:
            whole[name] = whole[name].astype("category").cat.codes.astype(np.float32)
    if metric == "auc":
        # The rarer class is the positive one, as Slipway picks it.
        positive = labels.value_counts().idxmin()
        labels = (labels == positive).astype(np.float32)
    train = slice(0, sizes[0])
    test = slice(sizes[0] + sizes[1], sum(sizes))
    x_train, y_train = whole.iloc[train], labels.iloc[train]
    x_test, y_test = whole.iloc[test], labels.iloc[test]
    scores = []
    if metric == "auc":
        for model in (xgb.XGBClassifier(), HistGradientBoostingClassifier()):
            model.fit(x_train, y_train)
            scores.append(roc_auc_score(y_test, model.predict_proba(x_test)[:, 1]))
    else:
        for model in (xgb.XGBRegressor(), HistGradientBoostingRegressor()):
            model.fit(x_train, y_train)
            scores.append(mean_squared_error(y_test, model.predict(x_test)) ** 0.5)
    print(f"xgboost {scores[0]:.6g} hist_gradient_boosting {scores[1]:.6g}")


if __name__ == "__main__":
    main()
