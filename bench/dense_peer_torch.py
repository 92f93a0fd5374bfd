# PyTorch (Debian's python3-torch) on the MLP of dense_peer.py (28 -> 256 -> 256 -> 1, ReLU, the
# same weights, read from its ONNX file): median seconds per forward call at batch 1 and 256, on 1
# and 2 threads, under torch.inference_mode, as JSON. Usage: dense_peer_torch.py MODEL.onnx
import json
import sys
import time

import onnx
import torch
from onnx import numpy_helper

weights = {tensor.name: torch.from_numpy(numpy_helper.to_array(tensor).copy()) for tensor in
           onnx.load(sys.argv[1]).graph.initializer}
layers = []
for layer in range(3):
    linear = torch.nn.Linear(weights[f"w{layer}"].shape[1], weights[f"w{layer}"].shape[0])
    linear.weight.data = weights[f"w{layer}"]
    linear.bias.data = weights[f"b{layer}"]
    layers += [linear, torch.nn.ReLU()] if layer < 2 else [linear]
model = torch.nn.Sequential(*layers).eval()
results = {"torch": torch.__version__}
for threads in (1, 2):
    torch.set_num_threads(threads)
    for batch in (1, 256):
        x = torch.sin(torch.arange(batch * 28, dtype=torch.float32)).reshape(batch, 28)
        calls = 2000 if batch == 1 else 50
        with torch.inference_mode():
            for _ in range(100):
                model(x)
            rounds = []
            for _ in range(7):
                start = time.perf_counter()
                for _ in range(calls):
                    model(x)
                rounds.append((time.perf_counter() - start) / calls)
        results[f"batch{batch}_threads{threads}"] = sorted(rounds)[3]
print(json.dumps(results))
