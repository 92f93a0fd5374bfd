"""Optuna's samplers on the synthetic objective of bench/tune_sampler_bench.cpp (the same space
and function), for bench/tune_samplers.sh.

Usage: /usr/bin/python3 bench/tune_peer.py tpe|random|qmc SEEDS TRIALS
Prints, per seed, "seed best_value sampler_us_per_trial" (time in ask(), the sampler's own).
"""
import math
import sys
import time
import warnings

import optuna


def objective_value(p):
    lr = math.log10(p["learning_rate"] / 0.05)
    depth = p["max_depth"] - 6
    subsample = p["subsample"] - 0.8
    lam = math.log10(p["lambda"])
    loss = lr * lr + 0.05 * depth * depth + subsample * subsample + 0.1 * lam * lam
    if p["grow_policy"] == "lossguide":
        leaves = math.log2(p["max_leaves"] / 64)
        loss += 0.05 * leaves * leaves
    else:
        loss += 0.3
    return loss


def suggest(trial):
    p = {
        "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.3, log=True),
        "max_depth": trial.suggest_int("max_depth", 3, 10),
        "subsample": trial.suggest_float("subsample", 0.5, 1.0),
        "lambda": trial.suggest_float("lambda", 0.01, 10.0, log=True),
        "grow_policy": trial.suggest_categorical("grow_policy", ["depthwise", "lossguide"]),
    }
    if p["grow_policy"] == "lossguide":
        p["max_leaves"] = trial.suggest_int("max_leaves", 16, 256, log=True)
    return p


def main():
    name, seeds, trials = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    for seed in range(1, seeds + 1):
        if name == "tpe":
            sampler = optuna.samplers.TPESampler(seed=seed)
        elif name == "qmc":
            sampler = optuna.samplers.QMCSampler(scramble=True, seed=seed)
        else:
            sampler = optuna.samplers.RandomSampler(seed=seed)
        study = optuna.create_study(direction="minimize", sampler=sampler)
        best = float("inf")
        sampling = 0.0
        for _ in range(trials):
            start = time.perf_counter()
            trial = study.ask()
            p = suggest(trial)  # the sampler runs inside the suggest calls
            sampling += time.perf_counter() - start
            value = objective_value(p)
            study.tell(trial, value)
            best = min(best, value)
        print(f"{seed} {best:.6g} {sampling / trials * 1e6:.3f}")


if __name__ == "__main__":
    main()
