#!/usr/bin/python3
"""An independent Llama forward pass in numpy (float64), for the engine's logits to be checked
against: reads a GGUF file itself (ggml's docs/gguf.md), dequantizes F32, F16, BF16, Q8_0, Q4_0
and Q4_K as ggml-common.h lays them out, and prints the logits of every position of a prompt, a
line of numbers per position. Usage: llama_reference.py MODEL.gguf TOKEN,TOKEN,...

A quantized matrix multiplies inputs quantized as the engine's contract says (slipway/kernels.h,
and what llama.cpp does too): per block of 32, scale = max|x| / 127 in float32 and q = x / scale
rounded to nearest even; the product is then exact but for float rounding.
"""
import struct
import sys

import numpy as np

VALUE_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
# ggml type: (block elements, block bytes)
TYPE_SIZES = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 12: (256, 144)}


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, fmt):
        value = struct.unpack_from(fmt, self.data, self.at)[0]
        self.at += struct.calcsize(fmt)
        return value

    def string(self):
        length = self.take("<Q")
        text = self.data[self.at:self.at + length].decode("utf-8")
        self.at += length
        return text

    def value(self, kind):
        if kind == 8:
            return self.string()
        if kind == 9:
            element, count = self.take("<I"), self.take("<Q")
            return [self.value(element) for _ in range(count)]
        return self.take(VALUE_FORMATS[kind])


def read_gguf(path):
    data = open(path, "rb").read()
    reader = Reader(data)
    assert reader.take("<I") == 0x46554747
    reader.take("<I")
    tensor_count, key_count = reader.take("<Q"), reader.take("<Q")
    metadata = {}
    for _ in range(key_count):
        key = reader.string()
        metadata[key] = reader.value(reader.take("<I"))
    infos = []
    for _ in range(tensor_count):
        name = reader.string()
        dims = [reader.take("<Q") for _ in range(reader.take("<I"))]
        infos.append((name, dims, reader.take("<I"), reader.take("<Q")))
    alignment = metadata.get("general.alignment", 32)
    start = reader.at + (alignment - reader.at % alignment) % alignment
    tensors = {}
    for name, dims, kind, offset in infos:
        elements = int(np.prod(dims))
        block_elements, block_bytes = TYPE_SIZES[kind]
        raw = data[start + offset:start + offset + elements // block_elements * block_bytes]
        tensors[name] = dequantize(raw, kind, elements).reshape(list(reversed(dims)))
        if kind in QUANTIZED_TYPES:
            QUANTIZED_TENSORS.add(name)
    return metadata, tensors


QUANTIZED_TYPES = {8, 2, 12}
QUANTIZED_TENSORS = set()


def quantize_input(x):
    blocks = x.astype(np.float32).reshape(x.shape[0], -1, 32)
    scale = np.abs(blocks).max(axis=2, keepdims=True) / np.float32(127)
    inverse = np.where(scale > 0, np.float32(1) / np.where(scale > 0, scale, 1), np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(blocks * inverse), -127, 127)
    return (q.astype(np.float64) * scale.astype(np.float64)).reshape(x.shape)


def product(x, tensors, name):
    if name in QUANTIZED_TENSORS:
        x = quantize_input(x)
    return x @ tensors[name].T


def halves(raw):
    return np.frombuffer(raw, dtype="<f2").astype(np.float64)


def dequantize(raw, kind, elements):
    if kind == 0:
        return np.frombuffer(raw, dtype="<f4").astype(np.float64)
    if kind == 1:
        return halves(raw)
    if kind == 30:
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if kind == 8:  # Q8_0: d (half), 32 int8
        blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)
        d = halves(blocks[:, :2].tobytes())
        q = blocks[:, 2:].view(np.int8).astype(np.float64)
        return (q * d[:, None]).reshape(-1)
    if kind == 2:  # Q4_0: d (half), 16 bytes: value j low nibble of byte j, j + 16 high
        blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 18)
        d = halves(blocks[:, :2].tobytes())
        qs = blocks[:, 2:]
        q = np.concatenate([(qs & 0x0F), (qs >> 4)], axis=1).astype(np.float64) - 8
        return (q * d[:, None]).reshape(-1)
    if kind == 12:  # Q4_K
        blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 144)
        out = np.zeros((blocks.shape[0], 256))
        for b, block in enumerate(blocks):
            d, dmin = halves(block[0:2].tobytes())[0], halves(block[2:4].tobytes())[0]
            s = block[4:16].astype(np.int64)
            qs = block[16:]

            def scale_min(j):
                if j < 4:
                    return s[j] & 63, s[j + 4] & 63
                return (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)

            for chunk in range(4):
                q = qs[chunk * 32:(chunk + 1) * 32]
                sc, m = scale_min(2 * chunk)
                out[b, chunk * 64:chunk * 64 + 32] = d * sc * (q & 0xF) - dmin * m
                sc, m = scale_min(2 * chunk + 1)
                out[b, chunk * 64 + 32:chunk * 64 + 64] = d * sc * (q >> 4) - dmin * m
        return out.reshape(-1)
    raise ValueError(f"type {kind}")


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rotate(x, positions, heads, head_dim, rope_dims, base):
    x = x.reshape(len(positions), heads, head_dim).copy()
    pairs = np.arange(rope_dims // 2)
    angles = np.outer(positions, base ** (-2.0 * pairs / rope_dims))  # [tokens, pairs]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    first, second = x[:, :, 0:rope_dims:2].copy(), x[:, :, 1:rope_dims:2].copy()
    x[:, :, 0:rope_dims:2] = first * cos - second * sin
    x[:, :, 1:rope_dims:2] = first * sin + second * cos
    return x.reshape(len(positions), heads * head_dim)


def main():
    metadata, w = read_gguf(sys.argv[1])
    tokens = [int(t) for t in sys.argv[2].split(",")]
    width = metadata["llama.embedding_length"]
    heads = metadata["llama.attention.head_count"]
    kv_heads = metadata.get("llama.attention.head_count_kv", heads)
    head_dim = width // heads
    rope_dims = metadata.get("llama.rope.dimension_count", head_dim)
    base = metadata.get("llama.rope.freq_base", 10000.0)
    eps = metadata["llama.attention.layer_norm_rms_epsilon"]
    positions = np.arange(len(tokens))
    x = w["token_embd.weight"][tokens]
    for layer in range(metadata["llama.block_count"]):
        p = f"blk.{layer}."
        h = rms_norm(x, w[p + "attn_norm.weight"], eps)
        q = rotate(product(h, w, p + "attn_q.weight"), positions, heads, head_dim, rope_dims, base)
        k = rotate(product(h, w, p + "attn_k.weight"), positions, kv_heads, head_dim, rope_dims, base)
        v = product(h, w, p + "attn_v.weight")
        attended = np.zeros_like(q)
        group = heads // kv_heads
        for head in range(heads):
            g = head // group
            qh = q[:, head * head_dim:(head + 1) * head_dim]
            kh = k[:, g * head_dim:(g + 1) * head_dim]
            vh = v[:, g * head_dim:(g + 1) * head_dim]
            scores = qh @ kh.T / np.sqrt(head_dim)
            scores = np.where(np.tril(np.ones_like(scores)) > 0, scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores /= scores.sum(axis=1, keepdims=True)
            attended[:, head * head_dim:(head + 1) * head_dim] = scores @ vh
        x = x + product(attended, w, p + "attn_output.weight")
        h = rms_norm(x, w[p + "ffn_norm.weight"], eps)
        gate = product(h, w, p + "ffn_gate.weight")
        up = product(h, w, p + "ffn_up.weight")
        x = x + product(gate / (1 + np.exp(-gate)) * up, w, p + "ffn_down.weight")
    output = "output.weight" if "output.weight" in w else "token_embd.weight"
    logits = product(rms_norm(x, w["output_norm.weight"], eps), w, output)
    for row in logits:
        print(" ".join("%.17g" % value for value in row))


if __name__ == "__main__":
    main()
