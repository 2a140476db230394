"""Speed of the syntactic-evaluation scorer: batched by length vs one sentence at a time, same run.

    python benchmarks/syneval_speed.py [--config configs/lm/ptb-cpu.yaml] [--threads 2] [--batch-size 512]

A language model of the preset's size (random weights: speed does not depend on them) over a vocabulary
of ``--vocab`` words scores sentences with the lengths of the shared syneval sample (or, without it,
lengths drawn from 4-13 words). Both ways go through ``onlstm.syneval.evaluate.token_logprobs``: batched
(``--batch-size``) and one by one (batch size 1, the reference). They are timed in alternation, ``--repeats``
times each, after a warm-up; the medians and their ratio are printed, with the load average, since the
machine may be shared. Goal of issue #11: >= 2,000 sentences/s batched on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from onlstm.lm.config import load_config
from onlstm.models.language_model import LanguageModel, LMConfig
from onlstm.runs import setup_torch
from onlstm.syneval.evaluate import token_logprobs

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "data" / "syneval-sample" / "syneval_sample.tsv"


def sentence_lengths(n: int, seed: int) -> tuple[list[int], str]:
    """Word counts of ``n`` sentences: the sample's, cycled, or random 4-13 without it."""
    if SAMPLE.exists():
        lengths = [len(s.split()) for line in SAMPLE.read_text().splitlines() for s in line.split("\t")[1:]]
        return [lengths[i % len(lengths)] for i in range(n)], f"lengths of {SAMPLE.name}"
    r = random.Random(seed)
    return [r.randint(4, 13) for _ in range(n)], "random lengths 4-13 (sample not found)"


def timed(model, seqs, batch_size: int) -> float:
    start = time.perf_counter()
    token_logprobs(model, seqs, batch_size)
    return time.perf_counter() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "lm" / "ptb-cpu.yaml")
    ap.add_argument("--cell", default=None, help="encoder (default: the preset's)")
    ap.add_argument("--vocab", type=int, default=10000, help="vocabulary size (PTB: 10,000)")
    ap.add_argument("--sentences", type=int, default=2000, help="sentences scored batched per measurement")
    ap.add_argument("--reference-sentences", type=int, default=200, help="sentences scored one by one")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    setup_torch(args.threads)
    cfg = load_config(args.config, {})
    model_fields = {**cfg.model, **({"cell": args.cell} if args.cell else {})}
    torch.manual_seed(args.seed)
    model = LanguageModel(LMConfig(vocab_size=args.vocab, **model_fields)).eval()
    lengths, source = sentence_lengths(args.sentences, args.seed)
    g = torch.Generator().manual_seed(args.seed)
    # <eos> w1 ... wn . <eos>: n words plus the period and two <eos>
    seqs = [[0, *torch.randint(2, args.vocab, (n + 1,), generator=g).tolist(), 0] for n in lengths]
    reference = seqs[: args.reference_sentences]
    params = sum(p.numel() for p in model.parameters())
    print(
        f"model: {model.config.cell} {model.config.emb_size}-{model.config.hidden_sizes}, vocab {args.vocab}, "
        f"{params / 1e6:.1f}M parameters; {len(seqs)} sentences ({source}, mean {statistics.mean(lengths):.1f} words)"
    )
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, "
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    timed(model, seqs[: args.batch_size], args.batch_size)  # warm-up (kernel loading, allocator)
    timed(model, reference[:10], 1)
    batched, single = [], []
    for _ in range(args.repeats):
        batched.append(len(seqs) / timed(model, seqs, args.batch_size))
        single.append(len(reference) / timed(model, reference, 1))
    b, s = statistics.median(batched), statistics.median(single)
    print(f"batched (batch {args.batch_size}): {b:,.0f} sentences/s  (runs: {', '.join(f'{x:,.0f}' for x in batched)})")
    print(f"one by one:           {s:,.0f} sentences/s  (runs: {', '.join(f'{x:,.0f}' for x in single)})")
    print(
        f"ratio batched / one by one: {b / s:.1f}x; goal >= 2,000 sentences/s batched: {'met' if b >= 2000 else 'not met'}"
    )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
