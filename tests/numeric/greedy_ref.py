#!/usr/bin/env python3
"""`run --sample N --temperature 0` against an independent argmax: the float64 GPT-2 of
torch_ref.py on the weights of a Hugging Face export (read by hf_ref.py, json + numpy).

  greedy_ref.py HF_DIR TEXT_FILE START [PROMPT_LENGTH]
      TEXT_FILE holds what run printed for a byte-level model: the prompt of PROMPT_LENGTH
      bytes (default 0, at most context - 1), the tokens drawn, then one newline. START is the
      token the text starts from (10, a newline, for bytes). Each drawn token, given START, the
      prompt and the tokens before it (as many as the context holds), must be the reference's
      most likely token, or within TOL of its logit (a near tie that float32 may order
      otherwise). Prints how many were the argmax exactly; exits 1 on the first that is not.
  greedy_ref.py HF_DIR --generate N ID...
      The reference's own greedy N tokens after the ids (a start token, then a prompt's),
      printed as ids: for a model of another vocabulary, whose text run prints through --bpe.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_ref  # noqa: E402
from torch_ref import gpt2_logits  # noqa: E402

hf_ref.torch = torch  # hf_ref imports it only for its own `check`

TOL = 1e-4


def load(folder):
    config = json.load(open(os.path.join(folder, "config.json")))
    _, tensors = hf_ref.read_safetensors(os.path.join(folder, "model.safetensors"))
    tied = config["tie_word_embeddings"]
    layers, P = hf_ref.to_llmc(tensors, tied)
    V, C = P["wte"].shape
    T = P["wpe"].shape[0]
    return P, dict(layers=layers, C=C, NH=config["n_head"], T=T, V=V, B=1, tied=tied)


def generate(folder, count, ids):
    """--generate: the reference's own greedy continuation of ids (the start token and the
    prompt's), count tokens, printed space-separated; exits 1 where the two most likely are
    within TOL (float32 may order them otherwise, so the text would not be decided)."""
    P, shape = load(folder)
    T, text = shape["T"], list(ids)
    with torch.no_grad():
        for _ in range(count):
            window = text[-T:]
            tokens = torch.tensor([window + [text[0]] * (T - len(window))])
            logits = gpt2_logits(P, shape, tokens)[0, len(window) - 1]
            top = torch.topk(logits, 2)
            if float(top.values[0] - top.values[1]) < TOL:
                sys.exit(f"a near tie after {len(text)} tokens: the greedy text is not decided")
            text.append(int(top.indices[0]))
    print(" ".join(str(t) for t in text[len(ids):]))


def main():
    if sys.argv[2] == "--generate":
        return generate(sys.argv[1], int(sys.argv[3]), [int(t) for t in sys.argv[4:]])
    folder, text_file, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
    prompt_length = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    P, shape = load(folder)
    T = shape["T"]
    drawn = list(open(text_file, "rb").read())
    if not drawn or drawn[-1] != 10:
        sys.exit("the sample does not end with a newline")
    text = [start] + drawn[:-1]
    exact = 0
    with torch.no_grad():
        for i in range(1 + prompt_length, len(text)):
            window = text[max(0, i - T):i]
            tokens = torch.tensor([window + [start] * (T - len(window))])
            logits = gpt2_logits(P, shape, tokens)[0, len(window) - 1]
            best = int(logits.argmax())
            if logits[text[i]] < logits[best] - TOL:
                sys.exit(f"token {i}: run drew {text[i]} (logit {logits[text[i]]:.6f}), "
                         f"the most likely is {best} (logit {logits[best]:.6f})")
            exact += text[i] == best
    drawn_count = len(text) - 1 - prompt_length
    print(f"{exact} of {drawn_count} tokens the reference's argmax, the rest within {TOL} of it")


if __name__ == "__main__":
    main()
