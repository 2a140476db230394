"""Memory and time of reading a large language-modelling corpus with ``onlstm.data.ptb.load_corpus``.

    python benchmarks/corpus_memory.py [--words 10000000] [--types 50000] [--max-vocab 0]

Writes a generated corpus (Zipf-like word frequencies over ``--types`` word types, lines of 5-40 words;
train ``--words`` words, valid and test 1% each) into a temporary folder, then reads it in a fresh
process and prints the peak resident memory (``ru_maxrss``) of that process before and after
``load_corpus``, the seconds it took, and the bytes of the id tensors. The reference is the id tensors
themselves (8 bytes a token): the ratio says how much the reader needs beyond what it returns.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_cli import command, nonnegative_int, parser, positive_int

CHILD = """
import resource, sys, time
import torch
from onlstm.data.ptb import load_corpus
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
c = load_corpus(sys.argv[1], max_vocab=int(sys.argv[2]))
seconds = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ids = sum(s.ids.numel() * s.ids.element_size() for s in c.splits.values())
print(c.summary())
print(f"peak RSS before load_corpus {before / 1024:,.0f} MiB (torch imported), after {after / 1024:,.0f} MiB")
print(f"load_corpus: {seconds:,.1f} s; id tensors {ids / 2**20:,.0f} MiB; peak growth {(after - before) / 1024:,.0f} MiB "
      f"= {(after - before) * 1024 / ids:.2f}x the id tensors")
"""


def write_corpus(folder: Path, words: int, types: int, seed: int) -> None:
    r = random.Random(seed)
    vocab = [f"w{i}" for i in range(types)]
    cum = []
    total = 0.0
    for i in range(types):
        total += 1 / (i + 1)
        cum.append(total)
    for name, n in (("train.txt", words), ("valid.txt", words // 100), ("test.txt", words // 100)):
        with open(folder / name, "w") as f:
            left = n
            while left > 0:
                k = min(left, r.randint(5, 40))
                f.write(" ".join(r.choices(vocab, cum_weights=cum, k=k)) + "\n")
                left -= k


@command
def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--words", type=positive_int, default=10_000_000)
    ap.add_argument("--types", type=positive_int, default=50_000)
    ap.add_argument("--max-vocab", type=nonnegative_int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from onlstm.device import machine_line  # here: the parent imports torch only to name the machine

    print(f"# {machine_line()}", flush=True)  # the first line of every benchmark's output (CONTRIBUTING.md)
    with tempfile.TemporaryDirectory() as tmp:
        write_corpus(Path(tmp), args.words, args.types, args.seed)
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        print(f"generated corpus: {args.words:,} training words, {args.types:,} types, {size / 2**20:,.0f} MiB of text")
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        src = str(Path(__file__).resolve().parents[1] / "src")
        env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
        subprocess.run([sys.executable, "-c", CHILD, tmp, str(args.max_vocab)], check=True, env=env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
