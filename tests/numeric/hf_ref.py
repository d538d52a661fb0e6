#!/usr/bin/env python3
"""Hugging Face GPT-2 weights against the float64 PyTorch GPT-2 of torch_ref.py, read and
written here with json and numpy only (no safetensors or transformers package), so that
`run --export hf` and `run --init` are checked by a reader and a writer that share no code
with them.

  hf_ref.py check < LINES
      Each line: PATH DATA BATCHES MICRO HEADS LOSS. The mean loss of the weights in PATH (an
      HF folder, or a .safetensors file; HEADS is read from a folder's config.json) over
      micro-batches 0..BATCHES-1 of the llm.c token file DATA, cut as run cuts them, must
      equal LOSS (what run reported) to a relative 2e-5. Exits 1 if one does not.
  hf_ref.py prepare DIR --layers L --width C --heads H --context T --vocab V
      Writes seeded weights, far enough from any initialisation that the loss depends on every
      one of them: DIR/strong.safetensors (F32, untied, under "transformer."), the HF folders
      DIR/bf16 and DIR/f16 (tied, GPT2Model's names without "transformer."), and broken
      variants under DIR/bad, one per kind of damage; prints the name of the tensor stored
      last (the one a truncation cuts).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

torch = gpt2_loss = None  # imported by `check` only: `prepare` needs numpy alone

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


def loss_of(path, data, count, micro, heads):
    if os.path.isdir(path):
        config = json.load(open(os.path.join(path, "config.json")))
        _, tensors = read_safetensors(os.path.join(path, "model.safetensors"))
        tied, heads = config["tie_word_embeddings"], config["n_head"]
    else:
        _, tensors = read_safetensors(path)
        tied = "lm_head.weight" not in tensors
    layers, P = to_llmc(tensors, tied)
    V, C = P["wte"].shape
    T = P["wpe"].shape[0]
    shape = dict(layers=layers, C=C, NH=heads, T=T, V=V, B=micro, tied=tied)
    with torch.no_grad():
        losses = [gpt2_loss(P, shape, x, y).item() for x, y in batches(data, count, micro, T)]
    return sum(losses) / len(losses)


def cmd_check(args):
    global torch, gpt2_loss
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_ref import gpt2_loss  # the one float64 GPT-2 of the tests
    torch.set_default_dtype(torch.float64)
    failures = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        path, data, count, micro, heads, expect = line.split()
        loss = loss_of(path, data, int(count), int(micro), int(heads))
        rel = abs(loss - float(expect)) / abs(loss)
        print(f"{os.path.basename(path.rstrip('/'))} on {os.path.basename(data)}: reference {loss:.6f}, "
              f"run {float(expect):.6f} (rel {rel:.1e}, tolerance {LOSS_RTOL})")
        if rel > LOSS_RTOL:
            print(f"FAIL {path}: the reference's loss is not run's")
            failures += 1
    return 1 if failures else 0


def make_weights(args, seed, tied, prefix):
    rng = np.random.default_rng(seed)
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
    tensors = {prefix + k: v for k, v in hf.items()}
    if not tied:
        tensors["lm_head.weight"] = normal(0.5, V, C)
    return tensors


def write_folder(path, args, tensors, dtype, **config_changes):
    os.makedirs(path, exist_ok=True)
    write_safetensors(os.path.join(path, "model.safetensors"), tensors, dtype)
    config = dict(architectures=["GPT2LMHeadModel"], model_type="gpt2", vocab_size=args.vocab,
                  n_positions=args.context, n_ctx=args.context, n_embd=args.width, n_layer=args.layers,
                  n_head=args.heads, activation_function="gelu_new", layer_norm_epsilon=1e-5,
                  tie_word_embeddings="lm_head.weight" not in tensors)
    config.update(config_changes)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write_hostile(good, out, args):
    with open(good, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    names = [k for k in header if k != "__metadata__"]
    last = max(names, key=lambda k: header[k]["data_offsets"][1])

    def save(kind, new_header=None, tail=None, raw=None):
        if raw is None:
            text = json.dumps(new_header).encode()
            raw = struct.pack("<Q", len(text)) + text + (data if tail is None else tail)
        with open(os.path.join(out, kind + ".safetensors"), "wb") as f:
            f.write(raw)

    def changed(change):
        h = json.loads(json.dumps(header))
        change(h)
        return h

    os.makedirs(out, exist_ok=True)
    save("truncated", header, tail=data[:len(data) - 100])
    save("header_past_end", raw=struct.pack("<Q", len(blob)) + blob[8:])
    save("short", raw=blob[:5])
    text = blob[8:8 + n].replace(b'"shape"', b'"shape";', 1)
    save("bad_json", raw=struct.pack("<Q", len(text)) + text + data)

    def repeated(kind, first, again):
        # A key given twice, the second time as written: JSON readers differ on which one wins.
        text = blob[8:8 + n].rstrip(b" ")
        entry = json.dumps(header["transformer.wpe.weight"]).encode()
        if first is not None:
            text = text[:-1] + b", " + json.dumps(first).encode() + b": " + entry + b"}"
        text = text[:-1] + b", " + again + b": " + entry + b"}"
        save(kind, raw=struct.pack("<Q", len(text)) + text + data)

    repeated("repeated", None, b'"transformer.wpe\\u002eweight"')
    repeated("repeated_quoted", 'a "quoted\\" name', b'"a \\"quoted\\\\\\" name"')
    save("wrong_shape", changed(lambda h: h["transformer.wpe.weight"].update(
        shape=h["transformer.wpe.weight"]["shape"][::-1])))
    save("missing", changed(lambda h: h.pop("transformer.h.1.ln_2.bias")))
    save("wrong_dtype", changed(lambda h: h["transformer.h.0.attn.c_proj.bias"].update(dtype="I32")))
    save("wrong_span", changed(lambda h: h["transformer.h.0.mlp.c_fc.bias"]["data_offsets"].__setitem__(
        1, h["transformer.h.0.mlp.c_fc.bias"]["data_offsets"][1] + 4)))
    save("extra", changed(lambda h: h.__setitem__("transformer.h.9.ln_1.weight",
                                                  h["transformer.h.0.ln_1.weight"])))
    _, tensors = read_safetensors(good)
    write_folder(os.path.join(out, "heads"), args, tensors, "F32", n_head=2 * args.heads)
    del tensors["lm_head.weight"]
    write_folder(os.path.join(out, "headless"), args, tensors, "F32", tie_word_embeddings=False)
    return last


def cmd_prepare(args):
    os.makedirs(args.dir, exist_ok=True)
    strong = os.path.join(args.dir, "strong.safetensors")
    write_safetensors(strong, make_weights(args, 7, False, "transformer."))
    write_folder(os.path.join(args.dir, "bf16"), args, make_weights(args, 8, True, ""), "BF16")
    write_folder(os.path.join(args.dir, "f16"), args, make_weights(args, 9, True, ""), "F16")
    print(write_hostile(strong, os.path.join(args.dir, "bad"), args))
    return 0


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check")
    p = sub.add_parser("prepare")
    p.add_argument("dir")
    for key in ("layers", "width", "heads", "context", "vocab"):
        p.add_argument("--" + key, type=int, required=True)
    args = parser.parse_args()
    sys.exit({"check": cmd_check, "prepare": cmd_prepare}[args.cmd](args))


if __name__ == "__main__":
    main()
