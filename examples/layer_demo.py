"""A short layer demo: train a small ON-LSTM language model on a nested-bracket toy language and
show the master-forget distances it assigns to each token.

    python examples/layer_demo.py [--seconds 20] [--seed 0] [--json]

The language: a constituent is a letter or ``( X Y [Z] )`` with constituents X, Y, Z, so a model
that predicts the next token must track how deeply it is nested. After training, the demo prints
each held-out token with its distance ``d_f = 1 - mean(master forget)`` (the quantity ON-LSTM
parses with) and the correlation between ``d_f`` and the token's nesting depth.

It uses the public layer only (``onlstm.ONLSTM``; ``pip install onlstm`` without the experiments extra is
enough), so it is also an example of using the layer in a model of one's own.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time

import torch
from torch import nn

from onlstm import ONLSTM
from onlstm.flags import OneLineParser

LETTERS = "abcdefgh"
VOCAB = ["<eos>", "(", ")"] + list(LETTERS)
INDEX = {w: i for i, w in enumerate(VOCAB)}


def random_constituent(rng: random.Random, depth: int = 0, max_depth: int = 4) -> list[str]:
    if depth >= max_depth or (depth > 0 and rng.random() < 0.35):
        return [rng.choice(LETTERS)]
    kids = [random_constituent(rng, depth + 1, max_depth) for _ in range(rng.choice((2, 2, 3)))]
    return ["("] + [t for k in kids for t in k] + [")"]


def depths(tokens: list[str]) -> list[int]:
    """Nesting depth of every token (an opening bracket counts inside its own constituent)."""
    out, d = [], 0
    for t in tokens:
        if t == "(":
            d += 1
        out.append(d)
        if t == ")":
            d -= 1
    return out


class TinyLM(nn.Module):
    def __init__(self, vocab: int, emb: int = 32, hidden: int = 64, chunk: int = 4, layers: int = 2):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.rnn = ONLSTM(emb, hidden, num_layers=layers, chunk_size=chunk)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x):
        h, _, d = self.rnn(self.emb(x), return_distances=True)
        return self.out(h), d


def corpus(rng: random.Random, n: int) -> list[list[str]]:
    return [random_constituent(rng) + ["<eos>"] for _ in range(n)]


def batches(sents, batch_size, rng):
    order = list(range(len(sents)))
    rng.shuffle(order)
    for i in range(0, len(order), batch_size):
        chunk = [sents[j] for j in order[i : i + batch_size]]
        T = max(len(s) for s in chunk)
        x = torch.zeros(T + 1, len(chunk), dtype=torch.long)
        mask = torch.zeros(T, len(chunk), dtype=torch.bool)
        for b, s in enumerate(chunk):
            ids = [INDEX["<eos>"]] + [INDEX[t] for t in s]
            x[: len(ids), b] = torch.tensor(ids)
            mask[: len(s), b] = True
        yield x[:-1], x[1:], mask


def _train(model: TinyLM, train, seconds: float, rng: random.Random, quiet: bool) -> int:
    """Adam on ``train`` for ``seconds`` of wall time; returns the number of steps."""
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss(reduction="none")
    start, steps, loss_avg, shown = time.monotonic(), 0, None, 0.0
    while time.monotonic() - start < seconds:
        for x, y, mask in batches(train, 32, rng):
            logits, _ = model(x)
            loss = (loss_fn(logits.flatten(0, 1), y.flatten()) * mask.flatten()).sum() / mask.sum()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            steps += 1
            loss_avg = loss.item() if loss_avg is None else 0.95 * loss_avg + 0.05 * loss.item()
            elapsed = time.monotonic() - start
            if not quiet and elapsed - shown >= 2.0:  # a line now and then: no progress-bar package needed
                shown = elapsed
                print(f"training: {elapsed:4.0f}/{seconds:.0f}s  step {steps}  loss {loss_avg:.3f}", file=sys.stderr)
            if elapsed >= seconds:
                break
    return steps


def _held_out(model: TinyLM, held_out) -> tuple[float, list[float], list[int], list]:
    """Mean held-out loss, every token's last-layer distance and nesting depth, and up to 3 example sentences."""
    model.eval()
    loss_fn = nn.CrossEntropyLoss(reduction="none")
    all_d, all_depth, tot_loss, tot_n, examples = [], [], 0.0, 0, []
    with torch.no_grad():
        for x, y, mask in batches(held_out, 50, random.Random(1)):
            logits, d = model(x)
            tot_loss += (loss_fn(logits.flatten(0, 1), y.flatten()) * mask.flatten()).sum().item()
            tot_n += int(mask.sum())
            for b in range(x.shape[1]):
                n = int(mask[:, b].sum()) - 1  # tokens of the sentence, without the final <eos>
                toks = [VOCAB[i] for i in x[1 : n + 1, b].tolist()]
                dist = d.forget[1 : n + 1, b, -1].tolist()  # last layer, distance on reading each token
                all_d += dist
                all_depth += depths(toks)
                if len(examples) < 3 and 8 <= n <= 16:
                    examples.append(list(zip(toks, dist)))
    return tot_loss / tot_n, all_d, all_depth, examples


def run(seconds: float = 20.0, seed: int = 0, as_json: bool = False) -> dict:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    train, held_out = corpus(rng, 4000), corpus(rng, 200)
    model = TinyLM(len(VOCAB))
    start = time.monotonic()
    steps = _train(model, train, seconds, rng, quiet=as_json)
    train_seconds = round(time.monotonic() - start, 1)
    loss, all_d, all_depth, examples = _held_out(model, held_out)
    dd, dp = torch.tensor(all_d), torch.tensor(all_depth, dtype=torch.float)
    corr = torch.corrcoef(torch.stack([dd, dp]))[0, 1].item()
    result = {
        "train_seconds": train_seconds,
        "steps": steps,
        "held_out_loss": loss,
        "held_out_perplexity": float(torch.exp(torch.tensor(loss))),
        "corr_distance_depth": corr,
        "examples": [[(t, round(v, 3)) for t, v in ex] for ex in examples],
        "impl": model.rnn.resolved_impl(torch.device("cpu")),
    }
    if as_json:
        print(json.dumps(result))
        return result
    print(
        f"\ntrained {steps} steps in {result['train_seconds']}s ({result['impl']} kernel); "
        f"held-out perplexity {result['held_out_perplexity']:.3f}"
    )
    print("master-forget distance of each held-out token (last layer):")
    for ex in examples:
        print()
        for tok, v in ex:
            print(f"  {tok:>5}  {v:5.3f}  {'#' * round(40 * v)}")
    print(f"\ncorrelation between distance and nesting depth over {len(all_d)} tokens: {corr:+.3f}")
    return result


def positive_seconds(text: str) -> float:
    """An argparse ``type``: a finite number of seconds > 0 (``nan``, ``inf`` and ``-5`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return value


def seed(text: str) -> int:
    """An argparse ``type``: a whole number torch can seed with, 0 to 2**64 - 1 (a larger one overflowed in torch)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"must be from 0 to 2**64 - 1 (torch's range), got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description="Train a tiny ON-LSTM on a bracket language and print its distances.")
    ap.add_argument("--seconds", type=positive_seconds, default=20.0, help="training time budget (default 20)")
    ap.add_argument("--seed", type=seed, default=0, help="seed of the weights and the data, 0 to 2**64 - 1 (default 0)")
    ap.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    args = ap.parse_args(argv)
    run(seconds=args.seconds, seed=args.seed, as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
