#!/usr/bin/env python3
"""Hugging Face GPT-2 weights against the float64 PyTorch GPT-2 of torch_ref.py, read and
written here with json and numpy only (no safetensors or transformers package), so that
`run --export hf` and `run --init` are checked by a reader and a writer that share no code
with them.

  hf_ref.py loss PATH DATA BATCHES MICRO [--heads H] [--expect LOSS]
      The mean loss of the weights in PATH (an HF folder, or a .safetensors file with --heads)
      over micro-batches 0..BATCHES-1 of the llm.c token file DATA, cut as run cuts them.
      With --expect: exits 1 unless it equals LOSS to a relative 2e-5.
  hf_ref.py write PATH --layers L --width C --heads H --context T --vocab V [--tied]
                  [--dtype F32|BF16|F16] [--seed S] [--prefix transformer.]
      Writes seeded weights, large enough that the loss depends on every one of them, as an
      HF folder (config.json, model.safetensors) or, for a PATH ending .safetensors, one file.
  hf_ref.py hostile GOOD.safetensors OUTDIR
      Writes broken variants of a good file into OUTDIR, one per kind of damage.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import gpt2_loss  # noqa: E402  the one float64 GPT-2 of the tests

LOSS_RTOL = 2e-5
# HF name suffix in a block, llm.c name, stored transposed (Conv1D keeps [in, out]).
BLOCK = [("ln_1.weight", "ln1w", False), ("ln_1.bias", "ln1b", False),
         ("attn.c_attn.weight", "qkvw", True), ("attn.c_attn.bias", "qkvb", False),
         ("attn.c_proj.weight", "attprojw", True), ("attn.c_proj.bias", "attprojb", False),
         ("ln_2.weight", "ln2w", False), ("ln_2.bias", "ln2b", False),
         ("mlp.c_fc.weight", "fcw", True), ("mlp.c_fc.bias", "fcb", False),
         ("mlp.c_proj.weight", "fcprojw", True), ("mlp.c_proj.bias", "fcprojb", False)]
DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    if 8 + n > len(blob):
        sys.exit(f"{path}: header length {n} runs past the end")
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = np.frombuffer(data[begin:end], dtype=DTYPES[entry["dtype"]])
        if entry["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = raw.astype(np.float64).reshape(entry["shape"])
    return header.get("__metadata__", {}), out


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    header = {"__metadata__": metadata if metadata is not None else {"format": "pt"}}
    chunks, at = [], 0
    for name, array in tensors.items():
        if dtype == "BF16":  # to nearest even, as numpy has no bfloat16
            bits = np.ascontiguousarray(array, dtype="<f4").view(np.uint32).astype(np.uint64)
            raw = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
        else:
            raw = np.ascontiguousarray(array, dtype=DTYPES[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def to_llmc(tensors, tied):
    """HF names and layouts to torch_ref's (llm.c's) names and layouts."""
    prefix = "transformer." if "transformer.wte.weight" in tensors else ""
    P = {"wte": tensors[prefix + "wte.weight"], "wpe": tensors[prefix + "wpe.weight"],
         "lnfw": tensors[prefix + "ln_f.weight"], "lnfb": tensors[prefix + "ln_f.bias"]}
    layers = 0
    while f"{prefix}h.{layers}.ln_1.weight" in tensors:
        for suffix, key, transposed in BLOCK:
            w = tensors[f"{prefix}h.{layers}.{suffix}"]
            P[f"h{layers}.{key}"] = w.T if transposed else w
        layers += 1
    if not tied:
        if "lm_head.weight" not in tensors:
            sys.exit("the file says its head is untied but holds no lm_head.weight")
        P["lm_head"] = tensors["lm_head.weight"]
    return layers, {k: torch.tensor(np.ascontiguousarray(v)) for k, v in P.items()}


def batches(path, count, B, T):
    """Micro-batches 0..count-1 of an llm.c token file, as runtime/data.c cuts them."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        tokens = np.frombuffer(f.read(), dtype="<u2").astype(np.int64)
    assert header[0] == 20240520 and len(tokens) == header[2], f"{path}: not an llm.c token file"
    chunks = (len(tokens) - 1) // T
    for g in range(count):
        starts = [((g * B + b) % chunks) * T for b in range(B)]
        x = np.stack([tokens[s:s + T] for s in starts])
        y = np.stack([tokens[s + 1:s + T + 1] for s in starts])
        yield torch.from_numpy(x), torch.from_numpy(y)


def cmd_loss(args):
    if os.path.isdir(args.path):
        config = json.load(open(os.path.join(args.path, "config.json")))
        _, tensors = read_safetensors(os.path.join(args.path, "model.safetensors"))
        tied, heads = config["tie_word_embeddings"], config["n_head"]
    else:
        _, tensors = read_safetensors(args.path)
        tied, heads = "lm_head.weight" not in tensors, args.heads
    layers, P = to_llmc(tensors, tied)
    V, C = P["wte"].shape
    T = P["wpe"].shape[0]
    shape = dict(layers=layers, C=C, NH=heads, T=T, V=V, B=args.micro, tied=tied)
    with torch.no_grad():
        losses = [gpt2_loss(P, shape, x, y).item() for x, y in batches(args.data, args.batches, args.micro, T)]
    loss = sum(losses) / len(losses)
    if args.expect is None:
        print(f"{loss:.8f}")
        return 0
    rel = abs(loss - args.expect) / abs(loss)
    print(f"{args.path}: reference {loss:.6f}, run {args.expect:.6f} (rel {rel:.1e}, tolerance {LOSS_RTOL})")
    return 0 if rel <= LOSS_RTOL else 1


def cmd_write(args):
    rng = np.random.default_rng(args.seed)
    L, C, V, T = args.layers, args.width, args.vocab, args.context
    normal = lambda scale, *shape: rng.normal(0.0, scale, shape)  # noqa: E731
    # Every tensor far from its initial value (biases too), so each mix-up changes the loss.
    hf = {"wte.weight": normal(0.5, V, C), "wpe.weight": normal(0.5, T, C)}
    for l in range(L):
        for suffix, _, transposed in BLOCK:
            n_in = 4 * C if suffix == "mlp.c_proj.weight" else C
            n_out = {"attn.c_attn": 3 * C, "mlp.c_fc": 4 * C}.get(suffix.rsplit(".", 1)[0], C)
            if suffix.endswith("weight") and transposed:
                hf[f"h.{l}.{suffix}"] = normal(1.0 / np.sqrt(n_in), n_in, n_out)
            elif suffix.startswith("ln"):
                hf[f"h.{l}.{suffix}"] = (1.0 if suffix.endswith("weight") else 0.0) + normal(0.3, C)
            else:
                hf[f"h.{l}.{suffix}"] = normal(0.3, n_out)
    hf["ln_f.weight"] = 1.0 + normal(0.3, C)
    hf["ln_f.bias"] = normal(0.3, C)
    tensors = {args.prefix + k: v for k, v in hf.items()}
    if not args.tied:
        tensors["lm_head.weight"] = normal(0.5, V, C)
    if args.path.endswith(".safetensors"):
        write_safetensors(args.path, tensors, args.dtype)
        return 0
    os.makedirs(args.path, exist_ok=True)
    write_safetensors(os.path.join(args.path, "model.safetensors"), tensors, args.dtype)
    config = dict(architectures=["GPT2LMHeadModel"], model_type="gpt2", vocab_size=V, n_positions=T,
                  n_ctx=T, n_embd=C, n_layer=L, n_head=args.heads, activation_function="gelu_new",
                  layer_norm_epsilon=1e-5, tie_word_embeddings=bool(args.tied))
    with open(os.path.join(args.path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return 0


def cmd_hostile(args):
    with open(args.good, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    names = [k for k in header if k != "__metadata__"]
    last = max(names, key=lambda k: header[k]["data_offsets"][1])

    def save(kind, new_header=None, tail=None, raw=None):
        path = os.path.join(args.out, kind + ".safetensors")
        if raw is None:
            text = json.dumps(new_header if new_header is not None else header).encode()
            raw = struct.pack("<Q", len(text)) + text + (data if tail is None else tail)
        with open(path, "wb") as f:
            f.write(raw)

    os.makedirs(args.out, exist_ok=True)
    save("truncated", tail=data[:len(data) - 100])                            # names `last`
    save("header_past_end", raw=struct.pack("<Q", len(blob)) + blob[8:])
    save("short", raw=blob[:5])
    text = blob[8:8 + n].replace(b'"shape"', b'"shape";', 1)
    save("bad_json", raw=struct.pack("<Q", len(text)) + text + data)
    h = json.loads(json.dumps(header))
    h["transformer.wpe.weight"]["shape"] = h["transformer.wpe.weight"]["shape"][::-1]
    save("wrong_shape", h)
    h = json.loads(json.dumps(header))
    del h["transformer.h.1.ln_2.bias"]
    save("missing", h)
    h = json.loads(json.dumps(header))
    h["transformer.h.0.attn.c_proj.bias"]["dtype"] = "I32"
    save("wrong_dtype", h)
    h = json.loads(json.dumps(header))
    h["transformer.h.0.mlp.c_fc.bias"]["data_offsets"][1] += 4
    save("wrong_span", h)
    h = json.loads(json.dumps(header))
    h["transformer.h.9.ln_1.weight"] = h["transformer.h.0.ln_1.weight"]
    save("extra", h)
    print(last)
    return 0


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("loss")
    p.add_argument("path")
    p.add_argument("data")
    p.add_argument("batches", type=int)
    p.add_argument("micro", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--expect", type=float)
    p = sub.add_parser("write")
    p.add_argument("path")
    for key in ("layers", "width", "heads", "context", "vocab"):
        p.add_argument("--" + key, type=int, required=True)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--dtype", default="F32", choices=list(DTYPES))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--prefix", default="transformer.")
    p = sub.add_parser("hostile")
    p.add_argument("good")
    p.add_argument("out")
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)
    sys.exit({"loss": cmd_loss, "write": cmd_write, "hostile": cmd_hostile}[args.cmd](args))


if __name__ == "__main__":
    main()
