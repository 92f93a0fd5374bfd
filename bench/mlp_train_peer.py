# PyTorch's training step on the MLP of bench/mlp_train_bench.cpp (28 -> 256 -> 256 -> 1, ReLU,
# BCEWithLogits, AdamW lr 1e-3 wd 0.01, batch 256), float32 and bfloat16 autocast, 1 and 2 threads:
# median seconds per step over 7 rounds of 100 steps, as JSON. Usage: mlp_train_peer.py
import json
import time

import torch

torch.manual_seed(0)
rows = torch.randn(25600, 28)
labels = ((rows[:, ::3] ** 2 - 1).sum(1) + 0.3 * rows[:, 1::3].sum(1) > 0).float().unsqueeze(1)
results = {"torch": torch.__version__, "blas": torch.backends.mkldnn.is_available() and "oneDNN" or "none"}
for threads in (1, 2):
    torch.set_num_threads(threads)
    for precision in ("float32", "bfloat16"):
        model = torch.nn.Sequential(torch.nn.Linear(28, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                    torch.nn.ReLU(), torch.nn.Linear(256, 1))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        loss_function = torch.nn.BCEWithLogitsLoss()

        def step(first):
            batch = rows[first:first + 256]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
                loss = loss_function(model(batch).float(), labels[first:first + 256])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        for first in range(0, 25600, 256):
            step(first)  # warm-up
        rounds = []
        for _ in range(7):
            started = time.perf_counter()
            for first in range(0, 25600, 256):
                step(first)
            rounds.append((time.perf_counter() - started) / 100)
        results[f"{precision}_threads{threads}"] = sorted(rounds)[3]
print(json.dumps(results))
