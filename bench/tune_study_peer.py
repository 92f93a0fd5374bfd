"""Optuna 3.1's TPE (Debian's python3-optuna) tuning Slipway's GBDT: each trial runs
`slipway train` on the same files, space, seed and fixed parameters as `slipway tune` does in
bench/tune_study.sh, and reads the same held-out metric; nothing differs but the sampler and the
study around it.

Usage: /usr/bin/python3 bench/tune_study_peer.py SLIPWAY WORKSPACE TRAIN VALID TARGET METRIC
       DIRECTION SEED TRIALS [KEY=VALUE ...]
OPTUNA_MULTIVARIATE=1 runs TPESampler(multivariate=True).
Prints one line: "seed best_value ask_ms_per_trial best_so_far_by_trial(comma-separated)".
"""
import json
import os
import subprocess
import sys
import time
import warnings

import optuna

# The space of bench/tune_study_space.yaml.
def suggest(trial):
    return {
        "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.3, log=True),
        "max_depth": trial.suggest_int("max_depth", 2, 10),
        "min_child_weight": trial.suggest_float("min_child_weight", 0.1, 20, log=True),
        "subsample": trial.suggest_float("subsample", 0.5, 1.0),
        "colsample_bytree": trial.suggest_float("colsample_bytree", 0.5, 1.0),
        "lambda": trial.suggest_float("lambda", 0.01, 10, log=True),
    }


def main():
    slipway, home, train, valid, target, metric, direction, seed, trials = sys.argv[1:10]
    fixed = sys.argv[10:]
    seed, trials = int(seed), int(trials)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    multivariate = os.environ.get("OPTUNA_MULTIVARIATE", "0") == "1"
    sampler = optuna.samplers.TPESampler(seed=seed, multivariate=multivariate)
    study = optuna.create_study(direction=direction, sampler=sampler)
    asking = 0.0
    best = None
    history = []
    for _ in range(trials):
        start = time.perf_counter()
        trial = study.ask()
        params = suggest(trial)
        asking += time.perf_counter() - start
        command = [slipway, "--home", home, "train", "--data", train, "--test", valid, "--target", target,
                   "--model", "gbdt", "--seed", str(seed), "--json", "--no-progress", "--no-cache", "-q"]
        for key, value in list(params.items()) + [f.split("=", 1) for f in fixed]:
            command += ["--param", f"{key}={value}"]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        value = json.loads(out)["metrics"]["overall"][metric]
        study.tell(trial, value)
        better = best is None or (value > best if direction == "maximize" else value < best)
        best = value if better else best
        history.append(f"{best:.6g}")
    print(f"{seed} {best:.6g} {asking / trials * 1e3:.3f} {','.join(history)}")


if __name__ == "__main__":
    main()
