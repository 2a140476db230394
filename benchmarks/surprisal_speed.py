"""Speed of per-token surprisal (``LanguageModel.surprisals``, what ``onlstm lm surprisal`` runs): the prefix-tree
scorer against reading the sentences one at a time (the same model, same process, in alternation).

    python benchmarks/surprisal_speed.py [--config configs/lm/ptb-cpu.yaml] [--threads 2] [--repeats 3]

A language model of the preset's size (random weights: speed does not depend on them) over a 10,000-word
vocabulary scores two sets of sentences: the distinct sentences of the shared syneval sample (the shape of
SyntaxGym's suites: short sentences that share prefixes) and the first ``--ptb`` lines of PTB's test text
(longer, little sharing; generated 10-30-word lines without the shared data). Sentences/s of each set, the
one-at-a-time reference on the first ``--reference`` sentences, their ratio and the load average are
printed (the machine may be shared). Goal of issue #37: >= 2,000 sentences/s on 2 cores at this size.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from bench_cli import command, parser, positive_int
from onlstm.data.vocab import Vocab
from onlstm.device import machine_line, setup_torch
from onlstm.lm.config import load_config
from onlstm.models.language_model import LanguageModel, LMConfig
from onlstm.syneval.data import read_items

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def syneval_sentences() -> list[str]:
    sample = SHARED / "syneval-sample" / "syneval_sample.tsv"
    if not sample.exists():
        r = random.Random(0)
        return [" ".join(f"w{r.randrange(300)}" for _ in range(r.randint(4, 13))) for _ in range(2000)]
    return list(dict.fromkeys(s.lower() + " ." for it in read_items(sample) for s in it.sentences))


def ptb_sentences(n: int) -> list[str]:
    path = SHARED / "ptb" / "ptb.test.txt"
    if not path.exists():
        r = random.Random(1)
        return [" ".join(f"w{r.randrange(3000)}" for _ in range(r.randint(10, 30))) for _ in range(n)]
    return [line.strip() for line in path.read_text().splitlines() if line.strip()][:n]


def vocabulary(sentences: list[str], size: int) -> Vocab:
    words = dict.fromkeys(["<eos>", "<unk>", *(w for s in sentences for w in s.split())])
    filler = (f"filler{i}" for i in range(size))
    while len(words) < size:
        words[next(filler)] = None
    return Vocab(list(words)[:size])


def rate(n: int, fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return n / (time.perf_counter() - start)


def one_by_one(model: LanguageModel, sentences: list[str]) -> None:
    for s in sentences:
        model.surprisals([s], batch_size=1)


@command
def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "lm" / "ptb-cpu.yaml")
    ap.add_argument("--threads", type=positive_int, default=2)
    ap.add_argument("--batch-size", type=positive_int, default=2048)
    ap.add_argument("--ptb", type=positive_int, default=2000, help="PTB test lines scored")
    ap.add_argument("--reference", type=positive_int, default=20, help="sentences of each set read one at a time")
    ap.add_argument("--repeats", type=positive_int, default=3)
    args = ap.parse_args(argv)
    setup_torch(args.threads)
    sets = {"syneval sample (distinct)": syneval_sentences(), f"PTB test (first {args.ptb})": ptb_sentences(args.ptb)}
    torch.manual_seed(0)
    model = LanguageModel(LMConfig(vocab_size=10000, **load_config(args.config, {}).model)).eval()
    model.vocab = vocabulary([s for ss in sets.values() for s in ss], 10000)
    print(machine_line())
    print(f"model: {model.config.cell} {model.config.emb_size}-{model.config.hidden_sizes}, vocab 10,000")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, sentences in sets.items():
        words = sum(len(s.split()) for s in sentences) / len(sentences)
        model.surprisals(sentences[:200], args.batch_size)  # warm-up
        batched, single = [], []
        for _ in range(args.repeats):
            batched.append(rate(len(sentences), model.surprisals, sentences, args.batch_size))
            single.append(rate(args.reference, one_by_one, model, sentences[: args.reference]))
        b, s = statistics.median(batched), statistics.median(single)
        print(f"{name}: {len(sentences):,} sentences, {words:.1f} words each")
        print(
            f"  batched (prefix trees of {args.batch_size}): {b:,.0f} sentences/s (runs {[round(x) for x in batched]})"
        )
        print(
            f"  one at a time: {s:,.0f} sentences/s; ratio {b / s:.1f}x; goal >= 2,000: {'met' if b >= 2000 else 'not met'}"
        )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
