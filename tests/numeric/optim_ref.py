#!/usr/bin/env python3
"""Muon, LAMB, LARS, NAdamW and LANS in float64, written from the published rules, against a checkpoint
`run` wrote (PyTorch 1.13 has none of the first three; torch is used for the gradients, and for
NAdamW with weight_decay 0 its torch.optim.NAdam is a second reference).

  optim_ref.py check INIT DATA CKPT METRICS MICRO WINDOW STEPS TOTAL LR WARMUP FLOOR CLIP RULE
      replays `run --init INIT`'s first STEPS steps (of TOTAL) as torch_train_ref.py does
      (same micro-batches, mean gradient, global clipping, warmup and cosine decay), then
      applies RULE, a JSON object: {"kind": "muon"|"lamb"|"lars"|"nadamw"|"lans", ...its hyperparameters};
      several groups of 13 check several runs

The rules, per tensor of one layer (the checkpoint's per-layer arrays), g the clipped gradient:
  muon (Keller Jordan's Muon; shape scaling of Moonlight or the ratio rule) on the blocks'
    qkv (as three C x C blocks q, k, v), attention projection, fc and fc projection:
      B = mu B + g;  U = g + mu B (nesterov) or B;  X = U / (|U|_F + 1e-7), transposed when
      rows > cols;  ns_steps times  A = X X^T, X = a X + (b A + c A^2) X  with
      (a, b, c) = (3.4445, -4.7750, 2.0315);  W -= lr (s O + wd W)  with O = X (transposed
      back) and s = sqrt(max(1, rows / cols)) ("ratio") or 0.2 sqrt(max(rows, cols)) ("rms");
    every other tensor: AdamW with the group's lr (lr * group_lr / LR), betas, eps and decay
    on the embeddings and the head.
  lamb (You et al. 2019, with bias correction): m, v as Adam;  r = m^ / (sqrt(v^) + eps) + wd W;
      W -= lr * (|W| / |r|) * r, the ratio 1 when a norm is 0; biases and LayerNorm take no
      decay and no ratio.
  lans (Zheng et al. 2020, Algorithm 2), per block as lamb: h = g / |g| (0 when |g| is 0);
      m = beta1 m + (1 - beta1) h;  v = beta2 v + (1 - beta2) h^2;  D = sqrt(v / (1 - beta2^t)) + eps;
      r = m / (1 - beta1^t) / D + wd W;  c = h / D + wd W;
      W -= lr beta1 (|W| / |r|) r + lr (1 - beta1) (|W| / |c|) c, each ratio 1 when a norm is 0;
      biases and LayerNorm take no decay and no ratio (the normalisation still).
  lars (You et al. 2017): local = eta |W| / (|g| + wd |W| + eps), 1 when a norm is 0;
      B = mu B + lr local (g + wd W);  W -= B; biases and LayerNorm take no decay, local = 1.
  nadamw (Dozat 2016's NAdam with torch.optim.NAdam's momentum schedule, decoupled decay):
      mu_i = beta1 (1 - 0.5 * 0.96^(i psi)), P_t = mu_1 ... mu_t;  m, v as Adam;
      D = sqrt(v / (1 - beta2^t)) + eps;  W *= 1 - lr wd;
      W -= lr (1 - mu_t) / (1 - P_t) g / D + lr mu_{t+1} / (1 - P_t mu_{t+1}) m / D;
      biases and LayerNorm take no decay. With weight_decay 0 the same steps also run through
      torch.optim.NAdam (foreach=True: 1.13's single-tensor path divides the momentum term by
      1 - P_t mu_t mu_{t+1}, counting mu_t twice) and its weights must match the reference's.
Compared after the last step: the weights' change (to WEIGHT_RTOL of its largest value), the
first state buffer (m: momentum or Adam's m) and, for lamb, lans and Muon's AdamW group, v.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import gpt2_loss  # noqa: E402
from torch_train_ref import DECAYED, batch_reader, load_run, lr_at, read_checkpoint  # noqa: E402

NS_COEFFS = (3.4445, -4.7750, 2.0315)
MUON_KINDS = {"qkvw", "attprojw", "fcw", "fcprojw"}
LOSS_RTOL = 1e-5
STATE_RTOL = 1e-4
# Of the largest weight change of the tensor, where the weights are compared: at coordinates
# whose sqrt(v) is at least CONDITIONED of the tensor's largest, as torch_train_ref.py. An
# Adam-type step divides m by sqrt(v), so at a fraction f the float32 rounding of m (about
# 1e-6 of the largest m) is amplified 1/f: at f 1e-3, h1.qkvw of nadamw_nodecay was off by
# 1.1e-3 to 2.0e-3 of its largest change (OpenBLAS's SkylakeX and Haswell kernels) where m
# agreed to 2e-5. A wrong rule is off by far more (the mutants of the note: 1e-2 and above).
WEIGHT_RTOL = 3e-4
# LANS's second direction divides one step's normalised gradient by sqrt(v), with no average
# over steps to dilute its float32 noise: at the key rows of h1.qkvw, sqrt(v) 1.2% of the
# tensor's largest, the weights were off by 3.2e-4 and 4.0e-4 of the largest change where m
# and v agreed to 1e-6. Its mutants (no normalisation, no Nesterov term) are off by far more.
WEIGHT_RTOL_OF = {"lans": 1e-3}
CONDITIONED = 1e-2
TORCH_RTOL = 1e-5


def newton_schulz(u, steps):
    a, b, c = NS_COEFFS
    x = u / (np.linalg.norm(u) + 1e-7)
    flip = x.shape[0] > x.shape[1]
    if flip:
        x = x.T
    for _ in range(steps):
        A = x @ x.T
        x = a * x + (b * A + c * A @ A) @ x
    return x.T if flip else x


def muon_matrix(w, g, buf, lr, rule):
    buf *= rule["momentum"]
    buf += g
    u = g + rule["momentum"] * buf if rule["nesterov"] else buf
    rows, cols = u.shape
    scale = 0.2 * np.sqrt(max(rows, cols)) if rule["shape_scale"] == "rms" else np.sqrt(max(1.0, rows / cols))
    w -= lr * (scale * newton_schulz(u, rule["ns_steps"]) + rule["weight_decay"] * w)


def adam_direction(m, v, g, beta1, beta2, eps, t):
    m *= beta1
    m += (1 - beta1) * g
    v *= beta2
    v += (1 - beta2) * g * g
    return (m / (1 - beta1 ** t)) / (np.sqrt(v / (1 - beta2 ** t)) + eps)


def nadam_mu(beta1, psi, i):
    return beta1 * (1 - 0.5 * 0.96 ** (i * psi))


def step(rule, name, w, g, state, lr, t):
    """One update of tensor `name` in place; state holds its buffers."""
    kind = name.split(".")[-1]
    decay = kind in DECAYED
    m = state.setdefault("m", np.zeros_like(w))
    v = state.setdefault("v", np.zeros_like(w))
    if rule["kind"] == "muon" and kind in MUON_KINDS:
        blocks = np.split(np.arange(w.shape[0]), 3) if kind == "qkvw" else [np.arange(w.shape[0])]
        for rows in blocks:
            wb, bb = w[rows], m[rows]
            muon_matrix(wb, g[rows], bb, lr, rule)
            w[rows], m[rows] = wb, bb
    elif rule["kind"] == "muon":
        grp = rule["adamw"]
        d = adam_direction(m, v, g, grp["betas"][0], grp["betas"][1], grp["eps"], t)
        glr = lr * grp["lr"] / rule["lr"]
        w -= glr * (d + (grp["weight_decay"] * w if decay else 0.0))
    elif rule["kind"] == "lamb":
        d = adam_direction(m, v, g, rule["betas"][0], rule["betas"][1], rule["eps"], t)
        d = d + (rule["weight_decay"] * w if decay else 0.0)
        wn, dn = np.linalg.norm(w), np.linalg.norm(d)
        ratio = wn / dn if decay and wn > 0 and dn > 0 else 1.0
        w -= lr * ratio * d
    elif rule["kind"] == "nadamw":
        beta1, beta2 = rule["betas"]
        mu, mu_next = nadam_mu(beta1, rule["momentum_decay"], t), nadam_mu(beta1, rule["momentum_decay"], t + 1)
        product = state.get("mu_product", 1.0) * mu
        state["mu_product"] = product
        m *= beta1
        m += (1 - beta1) * g
        v *= beta2
        v += (1 - beta2) * g * g
        denom = np.sqrt(v / (1 - beta2 ** t)) + rule["eps"]
        w *= 1 - lr * (rule["weight_decay"] if decay else 0.0)
        w -= lr * (1 - mu) / (1 - product) * g / denom + lr * mu_next / (1 - product * mu_next) * m / denom
    elif rule["kind"] == "lans":
        beta1, beta2 = rule["betas"]
        gn = np.linalg.norm(g)
        h = g / gn if gn > 0 else np.zeros_like(g)
        m *= beta1
        m += (1 - beta1) * h
        v *= beta2
        v += (1 - beta2) * h * h
        denom = np.sqrt(v / (1 - beta2 ** t)) + rule["eps"]
        wdw = rule["weight_decay"] * w if decay else 0.0
        r = m / (1 - beta1 ** t) / denom + wdw
        c = h / denom + wdw
        wn = np.linalg.norm(w)

        def ratio(d):
            dn = np.linalg.norm(d)
            return wn / dn if decay and wn > 0 and dn > 0 else 1.0
        w -= lr * beta1 * ratio(r) * r + lr * (1 - beta1) * ratio(c) * c
    elif rule["kind"] == "lars":
        wd = rule["weight_decay"] if decay else 0.0
        wn, gn = np.linalg.norm(w), np.linalg.norm(g)
        local = (rule["trust_coefficient"] * wn / (gn + rule["weight_decay"] * wn + rule["eps"])
                 if decay and wn > 0 and gn > 0 else 1.0)
        m *= rule["momentum"]
        m += lr * local * (g + wd * w)
        w -= m
    else:
        sys.exit(f"unknown rule {rule['kind']}")


def check(argv):
    init, data_path, ckpt, metrics = argv[:4]
    B, K, steps, total_steps = (int(a) for a in argv[4:8])
    peak, warmup, floor, clip = float(argv[8]), int(argv[9]), float(argv[10]), float(argv[11])
    rule = json.loads(argv[12])
    rule["lr"] = peak
    shape, start = load_run(init, ckpt, steps, B)
    weights = {n: a.copy() for n, a in start.items()}
    states = {n: {} for n in weights}

    batch = batch_reader(data_path, shape["T"], B)
    # torch.optim.NAdam as a second reference (its weight_decay is L2, so only without decay)
    torch_nadam = rule["kind"] == "nadamw" and rule["weight_decay"] == 0
    if torch_nadam:
        twins = {n: torch.tensor(a.copy()) for n, a in weights.items()}
        nadam = torch.optim.NAdam(list(twins.values()), lr=peak, betas=tuple(rule["betas"]), eps=rule["eps"],
                                  weight_decay=0.0, momentum_decay=rule["momentum_decay"], foreach=True)

    logged = [rec for rec in map(json.loads, open(metrics)) if "loss" in rec]
    failures = 0
    for t in range(steps):
        params = {n: torch.tensor(a, requires_grad=True) for n, a in weights.items()}
        mean = {n: np.zeros_like(a) for n, a in weights.items()}
        loss_sum = 0.0
        for k in range(K):
            for p in params.values():
                p.grad = None
            loss = gpt2_loss(params, shape, *batch(t * K + k))
            loss.backward()
            loss_sum += loss.item()
            for n, p in params.items():
                mean[n] += p.grad.numpy() / K
        norm = np.sqrt(sum((g * g).sum() for g in mean.values()))
        scale = clip / norm if 0 < clip < norm else 1.0
        lr = lr_at(t + 1, peak, warmup, total_steps, floor)
        rec = logged[t] if t < len(logged) else {}
        for key, ref in (("loss", loss_sum / K), ("lr", lr), ("grad_norm", norm)):
            rel = abs(rec.get(key, float("nan")) - ref) / abs(ref)
            if not rel <= LOSS_RTOL:
                print(f"FAIL step {t + 1} {key}: run logged {rec.get(key)}, reference {ref:.9g}")
                failures += 1
        for n in weights:
            step(rule, n, weights[n], mean[n] * scale, states[n], lr, t + 1)
        if torch_nadam:
            for n, p in twins.items():
                p.grad = torch.tensor(mean[n] * scale)
            nadam.param_groups[0]["lr"] = lr
            nadam.step()
    if torch_nadam:  # both float64 but torch's P_t, kept in float32
        worst_torch = max(np.max(np.abs(twins[n].numpy() - weights[n])) / max(np.max(np.abs(weights[n] - start[n])), 1e-30)
                          for n in weights)
        print(f"nadamw: the reference against torch.optim.NAdam after {steps} steps: worst weight change "
              f"error {worst_torch:.2e} of its largest value (tolerance {TORCH_RTOL})")
        if not worst_torch <= TORCH_RTOL:
            print("FAIL the float64 reference and torch.optim.NAdam disagree")
            failures += 1

    ours, ours_m, ours_v = read_checkpoint(ckpt, shape)
    worst = dict(weights=0.0, m=0.0, v=0.0)
    skipped = 0
    for n in weights:
        st = states[n]
        # Adam-type directions divide by sqrt(v): where a gradient is float32 noise (the key
        # bias's is zero in exact arithmetic) either side's step is arbitrary, as in
        # torch_train_ref.py; those coordinates are left out of the weights' check. A
        # gradient of exactly zero (a token never seen) is no noise: its step is decay only.
        rms = np.sqrt(st["v"])
        conditioned = (rms == 0) | (rms >= CONDITIONED * max(np.max(rms), 1e-30))
        skipped += int(np.sum(~conditioned))
        pairs = (("weights", (ours[n] - start[n])[conditioned], (weights[n] - start[n])[conditioned],
                  WEIGHT_RTOL_OF.get(rule["kind"], WEIGHT_RTOL)), ("m", ours_m[n], st["m"], STATE_RTOL), ("v", ours_v[n], st["v"], STATE_RTOL))
        for what, got, ref, tol in pairs:
            err = np.max(np.abs(got - ref), initial=0.0) / max(np.max(np.abs(ref), initial=0.0), 1e-30)
            worst[what] = max(worst[what], err)
            if err > tol:
                print(f"FAIL {what} of {n} after step {steps}: max error {err:.2e} of its largest "
                      f"value (tolerance {tol})")
                failures += 1
    print(f"{rule['kind']}: {steps} step(s) of {K} micro-batches, clip {clip}: losses, lr and grad_norm "
          f"of {len(logged)} logged steps; {len(weights)} tensors, worst error of the largest value: "
          f"weight change {worst['weights']:.2e} (tolerance {WEIGHT_RTOL_OF.get(rule['kind'], WEIGHT_RTOL)}; {skipped} ill-conditioned "
          f"weights not compared), m {worst['m']:.2e}, v {worst['v']:.2e} (tolerance {STATE_RTOL})")
    return failures


def newton_schulz_self_check():
    """The reference's own orthogonalisation, against its definition: with the published
    coefficients, 5 steps leave every singular value of a random matrix in about [0.68, 1.13]
    (Keller Jordan's Muon), in the shape given, so a slip common to both sides still shows."""
    rng = np.random.default_rng(1)
    for shape in ((16, 16), (64, 16), (16, 64)):
        x = newton_schulz(rng.standard_normal(shape), 5)
        s = np.linalg.svd(x, compute_uv=False)
        if x.shape != shape or not (0.6 < s.min() and s.max() < 1.2):
            sys.exit(f"the reference's Newton-Schulz is wrong: {shape} -> {x.shape}, singular "
                     f"values in [{s.min():.3f}, {s.max():.3f}], expected about [0.68, 1.13]")


def main():
    newton_schulz_self_check()
    if len(sys.argv) > 2 and (len(sys.argv) - 2) % 13 == 0 and sys.argv[1] == "check":
        failures = 0
        for i in range(2, len(sys.argv), 13):
            case = sys.argv[i:i + 13]
            print(f"== run {os.path.basename(os.path.dirname(os.path.dirname(case[2])))}")
            failures += check(case)
        return 1 if failures else 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
