#!/usr/bin/env python3
"""Record a training run into Slipway from code that runs elsewhere, with the standard library only.

What MLflow's tracking client does, against `slipway serve`'s management API: start a run (with an
id chosen here, so a retried start finds the run it made), log params, a metric per step (batched,
100 steps), a tag, upload a file checked against its sha256, and end the run. `slipway runs` and
`slipway show RUN_ID` then print it beside the runs Slipway trained.

    python3 examples/track_run.py --url http://127.0.0.1:8080 [--token TOKEN] [--experiment NAME]

The token needs the `read` role (or above) when the server runs with --auth. The "training" here is
a least-squares line fitted by gradient descent on made-up points: the point is the calls, which a
PyTorch loop makes the same way (log `loss.item()` each step, upload `torch.save`'s file at the end).
"""
import argparse
import hashlib
import json
import random
import secrets
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


class Slipway:
    def __init__(self, url, token=None, attempts=5):
        self.url = url.rstrip("/")
        self.token = token
        self.attempts = attempts

    def call(self, method, path, body=None, query=None, raw=None):
        """One API call, retried on connection errors, 429 and 503 (every call here may be repeated)."""
        target = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Content-Type": "application/octet-stream" if raw is not None else "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        for attempt in range(self.attempts):
            request = urllib.request.Request(target, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return json.loads(response.read() or b"{}")
            except urllib.error.HTTPError as error:
                message = error.read().decode(errors="replace")
                if error.code in (429, 503) and attempt + 1 < self.attempts:
                    time.sleep(0.2 * 2**attempt)
                    continue
                raise SystemExit(f"{method} {path}: {error.code} {message}")
            except urllib.error.URLError as error:
                if attempt + 1 < self.attempts:
                    time.sleep(0.2 * 2**attempt)
                    continue
                raise SystemExit(f"{method} {path}: {error.reason}")
        raise SystemExit(f"{method} {path}: no answer after {self.attempts} attempts")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--token")
    parser.add_argument("--experiment", default="external")
    parser.add_argument("--steps", type=int, default=100)
    arguments = parser.parse_args()
    slipway = Slipway(arguments.url, arguments.token)

    learning_rate = 0.05
    run_id = secrets.token_hex(16)  # ours: a retried start finds the run it made
    run = slipway.call("POST", "/api/runs", {
        "experiment": arguments.experiment,
        "run_id": run_id,
        "params": {"learning_rate": str(learning_rate), "steps": str(arguments.steps), "model": "line"},
        "tags": {"framework": "stdlib", "script": "examples/track_run.py"},
    })
    print(f"run {run['run_id']} started in experiment {run['experiment']}", file=sys.stderr)

    generator = random.Random(7)
    points = [(x / 10, 3 * x / 10 + 1 + generator.gauss(0, 0.1)) for x in range(50)]
    slope, intercept = 0.0, 0.0
    pending = []
    for step in range(arguments.steps):
        gradient_slope = sum(2 * (slope * x + intercept - y) * x for x, y in points) / len(points)
        gradient_intercept = sum(2 * (slope * x + intercept - y) for x, y in points) / len(points)
        slope -= learning_rate * gradient_slope
        intercept -= learning_rate * gradient_intercept
        loss = sum((slope * x + intercept - y) ** 2 for x, y in points) / len(points)
        pending.append({"key": "loss", "value": loss, "step": step})
        if len(pending) == 25 or step + 1 == arguments.steps:  # a batch per 25 steps: 4 calls for 100
            slipway.call("POST", f"/api/runs/{run_id}/log", {"metrics": pending})
            pending = []

    model = json.dumps({"slope": slope, "intercept": intercept}).encode()
    slipway.call("POST", f"/api/runs/{run_id}/artifacts", query={
        "path": "model.json", "sha256": hashlib.sha256(model).hexdigest()}, raw=model)
    slipway.call("POST", f"/api/runs/{run_id}/log", {"tags": {"fitted": f"y = {slope:.3f} x + {intercept:.3f}"}})
    ended = slipway.call("POST", f"/api/runs/{run_id}/end", {"status": "FINISHED"})
    print(f"run {run_id} {ended['status']}: final loss {ended['metrics']['loss']:.5f}", file=sys.stderr)
    print(run_id)


if __name__ == "__main__":
    main()
