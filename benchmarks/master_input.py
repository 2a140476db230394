"""Does the fixed master input gate ('reverse') help?  'paper' vs 'reverse', same budget and seeds.

    python benchmarks/master_input.py --data-dir ../shared/data/ptb [--steps 600] [--seeds 0 1]

A small word-level language model (embedding 200 -> 2-layer ON-LSTM of 200 units, chunk 20 ->
10 chunks, so the paper's dead top chunk is 10% of each layer -> linear decoder) is trained with
Adam for a fixed number of BPTT steps on the start of PTB's training text, for each mode and seed,
and evaluated on the start of the validation text. Prints validation perplexity per run and the
mean per mode. Without the data directory it exits with a message (nothing is downloaded).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

import onlstm
from bench_cli import command, parser, positive_int


def read_tokens(path: Path, vocab: dict, limit: int) -> torch.Tensor:
    ids = []
    with open(path) as f:
        for line in f:
            for w in line.split() + ["<eos>"]:
                ids.append(vocab.setdefault(w, len(vocab)))
            if len(ids) >= limit:
                break
    return torch.tensor(ids[:limit])


class LM(nn.Module):
    def __init__(self, vocab, emb, hidden, chunk, mode):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        nn.init.uniform_(self.emb.weight, -0.1, 0.1)
        self.rnn = onlstm.ONLSTM(emb, hidden, num_layers=2, chunk_size=chunk, master_input=mode, dropout=0.2)
        self.drop = nn.Dropout(0.3)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x, hx=None):
        h, hx = self.rnn(self.drop(self.emb(x)), hx)
        return self.out(self.drop(h)), hx


def batchify(ids, bsz):
    n = ids.numel() // bsz
    return ids[: n * bsz].view(bsz, n).t().contiguous()


def evaluate(model, data, bptt=35):
    model.eval()
    tot, cnt, hx = 0.0, 0, None
    with torch.no_grad():
        for i in range(0, data.shape[0] - 1, bptt):
            x, y = data[i : i + bptt], data[i + 1 : i + 1 + bptt]
            x = x[: y.shape[0]]
            logits, hx = model(x, hx)
            tot += nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
            cnt += y.numel()
    return math.exp(tot / cnt)


@command
def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "ptb")
    ap.add_argument("--steps", type=positive_int, default=600)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--train-tokens", type=positive_int, default=300_000)
    ap.add_argument("--valid-tokens", type=positive_int, default=30_000)
    ap.add_argument("--chunk", type=positive_int, default=20)
    args = ap.parse_args(argv)
    train_file = args.data_dir / "ptb.train.txt"
    if not train_file.exists():
        print(f"no PTB text at {args.data_dir} (need ptb.train.txt, ptb.valid.txt); pass --data-dir", file=sys.stderr)
        return 2
    torch.set_flush_denormal(True)
    vocab: dict = {}
    train = batchify(read_tokens(train_file, vocab, args.train_tokens), 32)
    valid = batchify(read_tokens(args.data_dir / "ptb.valid.txt", vocab, args.valid_tokens), 10)
    results = {}
    for mode in ("paper", "reverse"):
        for seed in args.seeds:
            torch.manual_seed(seed)
            model = LM(len(vocab), 200, 200, args.chunk, mode)
            opt = torch.optim.Adam(model.parameters(), lr=2e-3)
            t0, step, hx, i = time.time(), 0, None, 0
            model.train()
            while step < args.steps:
                if i + 36 > train.shape[0]:
                    i, hx = 0, None
                x, y = train[i : i + 35], train[i + 1 : i + 36]
                i += 35
                hx = None if hx is None else tuple(h.detach() for h in hx)
                logits, hx = model(x, hx)
                loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 0.25 * 10)
                opt.step()
                step += 1
            ppl = evaluate(model, valid)
            results.setdefault(mode, []).append(ppl)
            print(
                f"{mode:8s} seed {seed}: valid ppl {ppl:8.2f}  ({time.time() - t0:.0f}s, {args.steps} steps)",
                flush=True,
            )
    print(
        f"\nvocab {len(vocab)}, train tokens {train.numel()}, valid tokens {valid.numel()}, "
        f"2x200 units, chunk {args.chunk}, {args.steps} steps of 32x35"
    )
    for mode, v in results.items():
        sd = statistics.stdev(v) if len(v) > 1 else float("nan")
        print(f"{mode:8s} mean valid ppl {statistics.mean(v):8.2f} (sd {sd:.2f}, {len(v)} seeds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
