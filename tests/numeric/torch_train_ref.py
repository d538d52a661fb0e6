#!/usr/bin/env python3
"""Training with gradient accumulation in float64 PyTorch, against a checkpoint `run` wrote.

  torch_train_ref.py init FILE LAYERS WIDTH HEADS CONTEXT VOCAB
      writes an llm.c GPT-2 file (version 3) of random weights for `run --init FILE`
  torch_train_ref.py check INIT DATA CKPT METRICS MICRO WINDOW STEPS TOTAL LR WARMUP FLOOR CLIP
      replays `run`'s first STEPS steps (of a program of TOTAL) from INIT and compares CKPT,
      the step_STEPS folder `run --init INIT` wrote; several such groups of 12 check several runs

The reference is written from the definitions, not from the executor: micro-batch g of step t
(0-based) is g = t * WINDOW + k, k < WINDOW, its sequences chunk (g * MICRO + b) mod chunks of
DATA; a step's gradient is the mean of its WINDOW micro-batch gradients (each of the mean
token loss); clipping scales it by CLIP / norm when its global norm exceeds CLIP (0 = off);
the learning rate of step t (1-based) rises linearly to LR over WARMUP steps, then falls on a
cosine to FLOOR * LR at step TOTAL; torch.optim.AdamW with decay on matrices and
embeddings. Compared: every step's loss, learning rate and gradient norm in METRICS; after the
last step, the weights (model.bin, and state.bin's head when untied) and AdamW's m and v. After
step 1 m / (1 - beta1) is the accumulated gradient itself, so that check is printed as such.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import gpt2_loss  # noqa: E402  the float64 GPT-2 the gradient check uses

BETAS = (0.9, 0.95)
EPS = 1e-8
WEIGHT_DECAY = 0.1
# Tolerances relative to the largest value of a tensor; float32 accumulation against float64.
LOSS_RTOL = 1e-5
MOMENT_RTOL = 1e-4
WEIGHT_RTOL = 3e-4  # of the largest change of the tensor over the run
CONDITIONED = 1e-2  # weights compared where sqrt(v) is at least this of the tensor's largest
KINDS = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw", "lm_head"}


def kind_shapes(L, C, T, V):
    """Each checkpoint tensor kind's shape, layers first (llm.c's order)."""
    return dict(wte=(V, C), wpe=(T, C), ln1w=(L, C), ln1b=(L, C), qkvw=(L, 3 * C, C),
                qkvb=(L, 3 * C), attprojw=(L, C, C), attprojb=(L, C), ln2w=(L, C), ln2b=(L, C),
                fcw=(L, 4 * C, C), fcb=(L, 4 * C), fcprojw=(L, C, 4 * C), fcprojb=(L, C),
                lnfw=(C,), lnfb=(C,))


def split(flat, L, C, T, V, tied):
    """The checkpoint layout (all kinds, then the untied head) as named per-layer arrays."""
    out, pos = {}, 0
    for kind, shape in kind_shapes(L, C, T, V).items():
        n = int(np.prod(shape))
        block = flat[pos:pos + n].reshape(shape)
        pos += n
        if kind in ("wte", "wpe", "lnfw", "lnfb"):
            out[kind] = block
        else:
            for layer in range(L):
                out[f"h{layer}.{kind}"] = block[layer]
    if not tied:
        out["lm_head"] = flat[pos:pos + V * C].reshape(V, C)
        pos += V * C
    assert pos == len(flat), f"layout: {pos} floats named, {len(flat)} given"
    return out


def write_init(path, L, C, NH, T, V):
    rng = np.random.default_rng(2024)
    parts = []
    for kind, shape in kind_shapes(L, C, T, V).items():
        base = 1.0 if kind in ("ln1w", "ln2w", "lnfw") else 0.0
        parts.append(base + 0.1 * rng.standard_normal(int(np.prod(shape))))
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [20240326, 3, T, V, L, NH, C, V]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.concatenate(parts).astype(np.float32).tobytes())


def read_floats(path, offset, count):
    with open(path, "rb") as f:
        f.seek(offset)
        data = np.frombuffer(f.read(4 * count), dtype=np.float32)
    assert len(data) == count, f"{path}: truncated"
    return data.astype(np.float64)


def lr_at(t, peak, warmup, steps, floor):
    if warmup > 0 and t <= warmup:
        return peak * t / warmup
    progress = min(1.0, (t - warmup) / (steps - warmup)) if steps > warmup else 1.0
    low = floor * peak
    return low + (peak - low) * 0.5 * (1.0 + np.cos(np.pi * progress))


def load_run(init, ckpt, steps, B):
    """The run's shape (from the init file's header and the checkpoint's, which must be at
    step `steps`) and the initial weights by name, as run --init read them."""
    header = np.fromfile(init, dtype=np.int32, count=256)
    T, V, L, NH, C = (int(x) for x in header[2:7])
    sh = np.fromfile(os.path.join(ckpt, "state.bin"), dtype=np.int64, count=16)
    tied, done, total = int(sh[7]), int(sh[10]), int(sh[11])
    if done != steps:
        sys.exit(f"{ckpt}: step {done}, expected {steps}")
    flat = read_floats(init, 1024, total - (0 if tied else V * C))
    if not tied:
        flat = np.concatenate([flat, flat[:V * C]])  # run --init starts an untied head from wte
    shape = dict(layers=L, C=C, NH=NH, T=T, V=V, B=B, tied=tied, total=total)
    return shape, split(flat, L, C, T, V, tied)


def read_checkpoint(ckpt, shape):
    """The checkpoint's weights (the head sits in state.bin when untied), m and v, by name."""
    L, C, T, V, tied, total = (shape[k] for k in ("layers", "C", "T", "V", "tied", "total"))
    state = os.path.join(ckpt, "state.bin")
    head = 0 if tied else V * C
    weights = np.concatenate([read_floats(os.path.join(ckpt, "model.bin"), 1024, total - head),
                              read_floats(state, 128 + 8 * total, head)])
    return (split(weights, L, C, T, V, tied), split(read_floats(state, 128, total), L, C, T, V, tied),
            split(read_floats(state, 128 + 4 * total, total), L, C, T, V, tied))


def batch_reader(data_path, T, B):
    """batch(g): micro-batch g of the token file as the runtime cuts it, (inputs, targets)."""
    tokens = np.fromfile(data_path, dtype=np.uint16, offset=1024).astype(np.int64)
    chunks = (len(tokens) - 1) // T

    def batch(g):
        rows = [((g * B + b) % chunks) * T for b in range(B)]
        x = np.stack([tokens[r:r + T] for r in rows])
        y = np.stack([tokens[r + 1:r + T + 1] for r in rows])
        return torch.from_numpy(x), torch.from_numpy(y)
    return batch


def check(argv):
    init, data_path, ckpt, metrics = argv[:4]
    B, K, steps, total_steps = (int(a) for a in argv[4:8])
    peak, warmup, floor, clip = float(argv[8]), int(argv[9]), float(argv[10]), float(argv[11])
    shape, start = load_run(init, ckpt, steps, B)
    params = {name: torch.tensor(a.copy(), requires_grad=True) for name, a in start.items()}
    names = list(params)
    opt = torch.optim.AdamW(
        [dict(params=[params[n] for n in names if n.split(".")[-1] in DECAYED],
              weight_decay=WEIGHT_DECAY),
         dict(params=[params[n] for n in names if n.split(".")[-1] not in DECAYED],
              weight_decay=0.0)],
        lr=peak, betas=BETAS, eps=EPS)

    batch = batch_reader(data_path, shape["T"], B)

    logged = [rec for rec in map(json.loads, open(metrics)) if "loss" in rec]
    failures, clipped = 0, []
    for t in range(steps):
        mean = {n: torch.zeros_like(p) for n, p in params.items()}
        loss_sum = 0.0
        for k in range(K):
            for p in params.values():
                p.grad = None
            loss = gpt2_loss(params, shape, *batch(t * K + k))
            loss.backward()
            loss_sum += loss.item()
            for n, p in params.items():
                mean[n] += p.grad / K
        norm = torch.sqrt(sum((g * g).sum() for g in mean.values())).item()
        scale = clip / norm if 0 < clip < norm else 1.0
        clipped += [t + 1] if scale != 1.0 else []
        lr = lr_at(t + 1, peak, warmup, total_steps, floor)
        rec = logged[t] if t < len(logged) else {}
        for key, ref in (("loss", loss_sum / K), ("lr", lr), ("grad_norm", norm)):
            rel = abs(rec.get(key, float("nan")) - ref) / abs(ref)
            if not rel <= LOSS_RTOL:
                print(f"FAIL step {t + 1} {key}: run logged {rec.get(key)}, reference {ref:.9g}")
                failures += 1
        for n, p in params.items():
            p.grad = mean[n] * scale
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()

    ours, ours_m, ours_v = read_checkpoint(ckpt, shape)
    worst = dict(weights=0.0, m=0.0, v=0.0)
    skipped = 0
    for n, p in params.items():
        state = opt.state[p]
        pairs = (("weights", ours[n] - start[n], p.detach().numpy() - start[n], WEIGHT_RTOL),
                 ("m", ours_m[n], state["exp_avg"].numpy(), MOMENT_RTOL),
                 ("v", ours_v[n], state["exp_avg_sq"].numpy(), MOMENT_RTOL))
        # Adam divides by sqrt(v): where a gradient is float32 noise (the key bias's is zero
        # in exact arithmetic) either side's update is +-lr whatever its sign, and at sqrt(v)
        # a fraction f of the tensor's largest, m's float32 error (MOMENT_RTOL of the largest
        # m) comes out 1/f times larger in the update. So the weights are compared where f is
        # at least 1e-2; m and v, linear in the gradients, still cover every coordinate.
        rms = np.sqrt(state["exp_avg_sq"].numpy())
        conditioned = rms >= CONDITIONED * max(np.max(rms), 1e-30)
        skipped += int(np.sum(~conditioned))
        for what, got, ref, tol in pairs:
            if what == "weights":
                got, ref = got[conditioned], ref[conditioned]
            err = np.max(np.abs(got - ref), initial=0.0) / max(np.max(np.abs(ref), initial=0.0), 1e-30)
            worst[what] = max(worst[what], err)
            if err > tol:
                print(f"FAIL {what} of {n} after step {steps}: max error {err:.2e} of its largest "
                      f"value (tolerance {tol})")
                failures += 1
    label = "the accumulated gradient (m / (1 - beta1))" if steps == 1 else "m"
    print(f"{steps} step(s) of {K} micro-batches, clip {clip} (clipped steps: {clipped}): losses, lr and grad_norm of "
          f"{len(logged)} logged steps; {len(params)} tensors, worst error of the largest value: "
          f"weight change {worst['weights']:.2e} (tolerance {WEIGHT_RTOL}; {skipped} weights of "
          f"gradient below {CONDITIONED:g} of their tensor's not compared), {label} "
          f"{worst['m']:.2e}, v {worst['v']:.2e} (tolerance {MOMENT_RTOL})")
    return failures


def main():
    if len(sys.argv) == 8 and sys.argv[1] == "init":
        write_init(sys.argv[2], *(int(a) for a in sys.argv[3:8]))
        return 0
    if len(sys.argv) > 2 and (len(sys.argv) - 2) % 12 == 0 and sys.argv[1] == "check":
        # Several cases in one process: importing torch is the slow part.
        cases = [sys.argv[i:i + 12] for i in range(2, len(sys.argv), 12)]
        failures = 0
        for case in cases:
            print(f"== run {os.path.basename(os.path.dirname(os.path.dirname(case[2])))}")
            failures += check(case)
        return 1 if failures else 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
