"""Speed of the syntactic-evaluation scorer: the prefix tree (new) vs right-padded batches (old), same run.

    python benchmarks/syneval_speed.py [--config configs/lm/ptb-cpu.yaml] [--threads 2] [--cell lstm]

A language model of the preset's size (random weights: speed does not depend on them) over a vocabulary
of ``--vocab`` words that holds every word of the data (as a model trained on Wikipedia would) scores the
items of the shared syneval sample (or, without it, generated minimal pairs of the sample's shape)
through ``onlstm.syneval.evaluate.score_items``, as ``onlstm syneval`` does:

* new: ``share_prefixes=True`` (each distinct prefix run once), ``--batch-size`` sentences per tree;
* old: ``share_prefixes=False`` (sorted by length, right-padded), ``--old-batch-size`` per batch (512 was
  the command's default before the prefix tree);
* one by one: the old path with batch size 1 on the first ``--reference-items`` items (0: skip).

Sentences/s counts every sentence of every item (the sample repeats some; each way scores a repeated
sentence once), as the command's ``sentences_per_s``. The ways are timed in alternation, ``--repeats`` times
each after a warm-up; medians and ratios are printed with the load average, since the machine may be
shared. Goal of issue #11: >= 2,000 sentences/s on 2 CPU cores.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from bench_cli import command, nonnegative_int, parser, positive_int
from onlstm.data.vocab import Vocab
from onlstm.device import machine_line, setup_torch
from onlstm.lm.config import load_config
from onlstm.models import prefix_tree
from onlstm.models.language_model import LanguageModel, LMConfig
from onlstm.models.prefix_tree import build_tree
from onlstm.syneval.data import Item, read_items
from onlstm.syneval.evaluate import Encoder, frame, score_items

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "data" / "syneval-sample" / "syneval_sample.tsv"


def generated_items(n: int, seed: int) -> list[Item]:
    """Minimal pairs shaped like the sample's: 4-13 words from a 300-word pool, one word changed."""
    r = random.Random(seed)
    pool = [f"w{i}" for i in range(300)]
    items = []
    for _ in range(n):
        words = [r.choice(pool) for _ in range(r.randint(4, 13))]
        k = r.randrange(1, len(words))
        other = [*words[:k], r.choice(pool), *words[k + 1 :]]
        items.append(Item("generated", "", " ".join(words), " ".join(other)))
    return items


def load_items(seed: int) -> tuple[list[Item], str]:
    if SAMPLE.exists():
        return read_items(SAMPLE), f"items of {SAMPLE.name}"
    return generated_items(1100, seed), "1,100 generated pairs (sample not found)"


def vocabulary(items: list[Item], size: int) -> Vocab:
    """Every word of the items, '.', then filler words up to ``size``."""
    words = dict.fromkeys(["<eos>", "<unk>", "."])
    for it in items:
        for s in (it.grammatical, it.ungrammatical, it.intrusive):
            words.update(dict.fromkeys((s or "").lower().split()))
    filler = (f"filler{i}" for i in range(size))
    while len(words) < size:
        words[next(filler)] = None
    return Vocab(words)


def n_sentences(items: list[Item]) -> int:
    return sum(3 if it.intrusive is not None else 2 for it in items)


def timed(model, vocab, items, packed_decoder: bool = True, **kw) -> float:
    """Sentences/s of one ``score_items`` call; ``packed_decoder=False``: the prefix tree's decoder on
    ``addmm`` instead of oneDNN's pre-packed weight (what the scorer did before)."""
    real = prefix_tree._onednn_linear
    prefix_tree._onednn_linear = (lambda: False) if not packed_decoder else real  # type: ignore[assignment]
    try:
        t = time.perf_counter()
        score_items(model, vocab, items, **kw)
        return n_sentences(items) / (time.perf_counter() - t)
    finally:
        prefix_tree._onednn_linear = real  # type: ignore[assignment]


def workload(vocab: Vocab, items: list[Item]) -> str:
    """Model steps each way runs: padded (every token of every distinct sentence) vs the prefix tree."""
    enc = Encoder(vocab)
    unique = {s for it in items for s in (it.grammatical, it.ungrammatical, it.intrusive) if s is not None}
    seqs = [enc.ids(frame(s, enc.period)) for s in unique]
    padded = sum(len(s) - 1 for s in seqs)
    return (
        f"{n_sentences(items):,} sentences, {len(unique):,} distinct; model steps: padded {padded:,}, "
        f"prefix tree {build_tree(seqs).steps:,}"
    )


def parse_args(argv):
    ap = parser(__doc__)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "lm" / "ptb-cpu.yaml")
    ap.add_argument("--cell", default=None, help="encoder (default: the preset's)")
    ap.add_argument("--vocab", type=positive_int, default=10000, help="vocabulary size (PTB: 10,000)")
    ap.add_argument("--batch-size", type=positive_int, default=2048, help="sentences per prefix tree (new)")
    ap.add_argument("--old-batch-size", type=positive_int, default=512, help="sentences per padded batch (old)")
    ap.add_argument("--reference-items", type=nonnegative_int, default=50, help="items scored one by one (0: skip)")
    ap.add_argument("--repeats", type=positive_int, default=3)
    ap.add_argument("--threads", type=positive_int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", action="store_true", help="instead: a torch.profiler table of one new-path pass")
    return ap.parse_args(argv)


def profile(model, vocab, items, batch_size: int) -> None:
    """The ops that take the time in one pass of the prefix-tree scorer (after a warm-up pass)."""
    from torch.profiler import profile as torch_profile

    score_items(model, vocab, items, batch_size=batch_size)
    with torch_profile() as prof:
        score_items(model, vocab, items, batch_size=batch_size)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


@command
def main(argv=None) -> int:
    args = parse_args(argv)
    setup_torch(args.threads)
    print(machine_line(), flush=True)  # the first line of every benchmark's output (CONTRIBUTING.md)
    cfg = load_config(args.config, {})
    model_fields = {**cfg.model, **({"cell": args.cell} if args.cell else {})}
    torch.manual_seed(args.seed)
    model = LanguageModel(LMConfig(vocab_size=args.vocab, **model_fields)).eval()
    items, source = load_items(args.seed)
    vocab = vocabulary(items, args.vocab)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {model.config.cell} {model.config.emb_size}-{model.config.hidden_sizes}, vocab {len(vocab)}, ")
    print(f"  {params / 1e6:.1f}M parameters; {source}: {workload(vocab, items)}")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average before: {load}")
    if args.profile:
        profile(model, vocab, items, args.batch_size)
        return 0
    tree = dict(share_prefixes=True, batch_size=args.batch_size)
    ways = {
        f"new: prefix tree (batch {args.batch_size})": tree,
        f"old: padded (batch {args.old_batch_size})": dict(share_prefixes=False, batch_size=args.old_batch_size),
        "tree, addmm decoder": dict(tree, packed_decoder=False),
    }
    reference = items[: args.reference_items]
    for kw in ways.values():  # warm-up (kernel loading, allocator)
        timed(model, vocab, items[:200], **kw)
    runs: dict[str, list[float]] = {name: [] for name in ways}
    single: list[float] = []
    for _ in range(args.repeats):
        for name, kw in ways.items():
            runs[name].append(timed(model, vocab, items, **kw))
        if reference:
            single.append(timed(model, vocab, reference, share_prefixes=False, batch_size=1))
    med = {name: statistics.median(r) for name, r in runs.items()}
    for name, r in runs.items():
        print(f"{name:<32} {med[name]:>7,.0f} sentences/s  (runs: {', '.join(f'{x:,.0f}' for x in r)})")
    if single:
        s = statistics.median(single)
        print(
            f"{'one by one (old path, batch 1)':<32} {s:>7,.0f} sentences/s  (runs: {', '.join(f'{x:,.0f}' for x in single)})"
        )
    new, old, addmm = med.values()
    print(f"ratio new / old: {new / old:.2f}x" + (f"; new / one by one: {new / s:.1f}x" if single else ""))
    print(f"ratio new / tree with the addmm decoder (before the packed oneDNN decoder): {new / addmm:.2f}x")
    print(f"goal >= 2,000 sentences/s: {'met' if new >= 2000 else 'not met'} ({args.threads} threads)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
