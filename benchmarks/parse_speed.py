"""Speed of computing parsing distances (what ``onlstm parsing eval-parse`` spends its time on), batched vs
one sentence at a time, measured in the same run.

    python benchmarks/parse_speed.py [--treebank ../shared/data/treebank] [--emb 200 --hidden 400 400 200]

The model has the shape of the ``lm/ptb-cpu`` preset by default, with random weights (speed does not
depend on training) and a 10,000-word vocabulary. Sentences come from the treebank directory
(normalised as eval-parse does); without one, random sentences of PTB-like lengths are used.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import torch

from bench_cli import command, parser, positive_int
from onlstm.data.vocab import Vocab
from onlstm.device import machine_line
from onlstm.models.language_model import LanguageModel, LMConfig
from onlstm.parsing.induce import sentence_distances


@command
def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument(
        "--treebank", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "treebank"
    )
    ap.add_argument("--emb", type=positive_int, default=200)
    ap.add_argument("--hidden", type=positive_int, nargs="+", default=[400, 400, 200])
    ap.add_argument("--chunk", type=positive_int, default=10)
    ap.add_argument("--batch-size", type=positive_int, default=128)
    ap.add_argument(
        "--one-by-one", type=positive_int, default=300, help="sentences timed one at a time (the reference)"
    )
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    if args.treebank.exists():
        from onlstm.data.treebank import load_treebank

        bank = load_treebank(args.treebank)
        sentences, source = [list(w) for w in bank.words], bank.name
    else:
        rng = random.Random(0)
        sentences = [[f"w{rng.randrange(9000)}" for _ in range(rng.randint(3, 40))] for _ in range(2000)]
        source = "random sentences (no treebank found)"
    words = sorted({w for s in sentences for w in s})[:9998]
    vocab = Vocab(["<eos>", "<unk>"] + words)
    model = LanguageModel(
        LMConfig(vocab_size=len(vocab), emb_size=args.emb, hidden_sizes=args.hidden, chunk_size=args.chunk)
    ).eval()
    n_words = sum(len(s) for s in sentences)
    print(
        f"{len(sentences)} sentences ({n_words} words) from {source}; model {args.emb}-"
        f"{'-'.join(map(str, args.hidden))}, chunk {args.chunk}; {machine_line()}"
    )
    sentence_distances(model, vocab, sentences[:64], args.batch_size)  # warm-up / kernel build
    t0 = time.perf_counter()
    sentence_distances(model, vocab, sentences, args.batch_size)
    batched = len(sentences) / (time.perf_counter() - t0)
    few = sentences[: args.one_by_one]
    t0 = time.perf_counter()
    for s in few:
        sentence_distances(model, vocab, [s], 1)
    single = len(few) / (time.perf_counter() - t0)
    print(f"batched ({args.batch_size}/batch): {batched:8.0f} sentences/s")
    print(f"one by one:            {single:8.0f} sentences/s (first {len(few)} sentences)")
    print(f"ratio batched / one-by-one: {batched / single:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
