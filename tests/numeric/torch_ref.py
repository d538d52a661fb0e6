#!/usr/bin/env python3
"""Checks a gradcheck --dump file against the same GPT-2 built in PyTorch, in float64.

File layout (little-endian), written by tests/numeric/gradcheck.c:
  int32 magic 0x70616369, version 1, layers, width, heads, context, vocab, micro, tied
  int32 n_tensors; float64 lr, beta1, beta2, eps, weight_decay, loss
  int32 tokens[B*T], targets[B*T]
  per tensor: char name[32], int64 size, int32 decay,
              float32 weights[size], gradient[size], weights after two AdamW steps[size]

Checks: the loss (relative 1e-5); every gradient (max |ours - torch| <= 1e-4 * max |torch|
of that tensor); two torch.optim.AdamW steps from the same weights and gradient against ours
(|ours - torch| of the update <= 1e-5 * max |torch update| + two float32 ulps of the weight). Exits 1 on a mismatch.
"""
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
ADAMW_RTOL = 1e-5
FLOAT32_EPS = 2.0 ** -23


def read_dump(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    magic, version, layers, width, heads, context, vocab, micro, tied = take("9i")
    if magic != 0x70616369 or version != 1:
        sys.exit(f"{path}: not a gradcheck dump")
    (n_tensors,) = take("i")
    lr, beta1, beta2, eps, weight_decay, loss = take("6d")
    bt = micro * context
    tokens = np.array(take(f"{bt}i"), dtype=np.int64).reshape(micro, context)
    targets = np.array(take(f"{bt}i"), dtype=np.int64).reshape(micro, context)
    tensors = {}
    for _ in range(n_tensors):
        name = take("32s")[0].split(b"\0")[0].decode()
        (size,) = take("q")
        (decay,) = take("i")
        arrays = [np.array(take(f"{size}f"), dtype=np.float64) for _ in range(3)]
        tensors[name] = dict(decay=decay, weights=arrays[0], grad=arrays[1], after=arrays[2])
    shape = dict(layers=layers, C=width, NH=heads, T=context, V=vocab, B=micro, tied=tied)
    hyper = dict(lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
    return shape, hyper, loss, torch.from_numpy(tokens), torch.from_numpy(targets), tensors


def shapes_of(shape):
    C, V, T = shape["C"], shape["V"], shape["T"]
    per_layer = dict(ln1w=(C,), ln1b=(C,), qkvw=(3 * C, C), qkvb=(3 * C,), attprojw=(C, C),
                     attprojb=(C,), ln2w=(C,), ln2b=(C,), fcw=(4 * C, C), fcb=(4 * C,),
                     fcprojw=(C, 4 * C), fcprojb=(C,))
    out = dict(wte=(V, C), wpe=(T, C), lnfw=(C,), lnfb=(C,))
    if not shape["tied"]:
        out["lm_head"] = (V, C)
    for layer in range(shape["layers"]):
        for key, s in per_layer.items():
            out[f"h{layer}.{key}"] = s
    return out


def gpt2_logits(P, shape, tokens):
    B, T, C, NH = shape["B"], shape["T"], shape["C"], shape["NH"]
    x = P["wte"][tokens] + P["wpe"][torch.arange(T)]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for layer in range(shape["layers"]):
        p = lambda key: P[f"h{layer}.{key}"]  # noqa: E731
        h = F.layer_norm(x, (C,), p("ln1w"), p("ln1b"), eps=1e-5)
        q, k, v = F.linear(h, p("qkvw"), p("qkvb")).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (C // NH) ** 0.5
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p("attprojw"), p("attprojb"))
        h = F.layer_norm(x, (C,), p("ln2w"), p("ln2b"), eps=1e-5)
        h = F.gelu(F.linear(h, p("fcw"), p("fcb")), approximate="tanh")
        x = x + F.linear(h, p("fcprojw"), p("fcprojb"))
    x = F.layer_norm(x, (C,), P["lnfw"], P["lnfb"], eps=1e-5)
    return F.linear(x, P["wte"] if shape["tied"] else P["lm_head"])


def gpt2_loss(P, shape, tokens, targets):
    logits = gpt2_logits(P, shape, tokens)
    return F.cross_entropy(logits.view(-1, shape["V"]), targets.view(-1))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: torch_ref.py DUMP")
    shape, hyper, our_loss, tokens, targets, tensors = read_dump(sys.argv[1])
    expected = shapes_of(shape)
    if set(expected) != set(tensors):
        sys.exit(f"tensor names differ: missing {sorted(set(expected) - set(tensors))}, "
                 f"extra {sorted(set(tensors) - set(expected))}")
    P = {name: torch.tensor(tensors[name]["weights"].reshape(s), requires_grad=True)
         for name, s in expected.items()}
    loss = gpt2_loss(P, shape, tokens, targets)
    loss.backward()

    failures = 0
    rel = abs(our_loss - loss.item()) / abs(loss.item())
    print(f"loss: ours {our_loss:.8f} torch {loss.item():.8f} (rel {rel:.2e}, tolerance {LOSS_RTOL})")
    failures += rel > LOSS_RTOL
    worst_grad = 0.0
    for name, s in expected.items():
        ref = P[name].grad.numpy().reshape(-1)
        err = np.max(np.abs(tensors[name]["grad"] - ref)) / max(np.max(np.abs(ref)), 1e-12)
        worst_grad = max(worst_grad, err)
        if err > GRAD_RTOL:
            print(f"FAIL gradient of {name}: max error {err:.2e} of its largest value")
            failures += 1
    print(f"gradients: {len(expected)} tensors, worst max-error/max-value {worst_grad:.2e} "
          f"(tolerance {GRAD_RTOL})")

    # Two AdamW steps with our gradient, decay on the tensors ours decays.
    params = {name: torch.tensor(tensors[name]["weights"].reshape(s), requires_grad=True)
              for name, s in expected.items()}
    groups = [dict(params=[params[n] for n in expected if tensors[n]["decay"]],
                   weight_decay=hyper["weight_decay"]),
              dict(params=[params[n] for n in expected if not tensors[n]["decay"]], weight_decay=0.0)]
    opt = torch.optim.AdamW(groups, lr=hyper["lr"], betas=hyper["betas"], eps=hyper["eps"])
    for name, s in expected.items():
        params[name].grad = torch.tensor(tensors[name]["grad"].reshape(s))
    for _ in range(2):
        opt.step()
    worst_step = 0.0
    for name in expected:
        before = tensors[name]["weights"]
        ref = params[name].detach().numpy().reshape(-1) - before
        ours = tensors[name]["after"] - before
        # Our weights are float32: allow two float32 ulps of the weight besides the tolerance.
        bound = ADAMW_RTOL * max(np.max(np.abs(ref)), 1e-12) + 2 * FLOAT32_EPS * np.abs(before)
        err = np.max(np.abs(ours - ref) / bound) * ADAMW_RTOL
        worst_step = max(worst_step, err)
        if err > ADAMW_RTOL:
            print(f"FAIL AdamW update of {name}: max error {err:.2e} of its largest value")
            failures += 1
    print(f"adamw: two steps, worst error/max-update {worst_step:.2e} beyond float32 rounding "
          f"(tolerance {ADAMW_RTOL})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
