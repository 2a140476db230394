"""Does a generated test stand for the real one? A trained classifier's accuracy by length on real pairs it never
trained on (its validation hold-out of Bowman et al.'s files) beside its accuracy on generated pairs of the same
lengths that it never trained on either (docs/results.md, issue #32).

    python benchmarks/logic_yardstick.py RUN [RUN ...] [--mix bowman] [--draws 500000] [--seed 2027]

The generated pairs follow the procedure that made the real files (``--mix bowman``: one stream of ``--draws``
draws, each length's first 85% in drawing order: the part Bowman et al. wrote as train, whose distribution the
validation pairs share); pairs the run trained on are left out. ``--mix original`` gives the old proxy instead.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

from bench_cli import command, parser, positive_int
from onlstm.logic.config import LogicTrainConfig
from onlstm.logic.data import load_training_examples, read_examples, split_train_valid
from onlstm.logic.evaluate import evaluate_examples
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.logic.model import load_classifier


def generated(mix: str, draws: int, seed: int, out: Path):
    """Pairs of 0-6 operators generated as the real training files were (train part of each bucket)."""
    if mix == "bowman":
        cfg = GenerateConfig(mix="bowman", per_length=10**6, test_fraction=0.15, draws=draws, seed=seed, max_ops=6)
    else:
        cfg = GenerateConfig(mix="original", per_length=34152, test_count=0, seed=seed, max_ops=6)
    generate_dataset(out, cfg)
    return read_examples(out, split="train")


@command
def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of `onlstm logic train` on the original files")
    ap.add_argument("--mix", choices=("bowman", "original"), default="bowman")
    ap.add_argument("--draws", type=positive_int, default=500_000)
    ap.add_argument("--seed", type=int, default=2027)
    ap.add_argument("--lengths", default="1-6")
    args = ap.parse_args(argv)
    lo, hi = (int(x) for x in args.lengths.split("-"))
    lengths = list(range(lo, hi + 1))
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        pool = generated(args.mix, args.draws, args.seed, Path(tmp))
    print(f"# {args.mix} pairs: {len(pool)} generated (seed {args.seed}); accuracy % by operators, real / generated")
    print("| run | " + " | ".join(map(str, lengths)) + " | pooled |")
    print("|---|" + "---:|" * (len(lengths) + 1))
    for run in args.runs:
        model, header = load_classifier(run)
        cfg = LogicTrainConfig.from_dict(header["train"])
        train, valid = split_train_valid(load_training_examples(header["data"]["path"], cfg), cfg)
        seen = {(ex.text_a, ex.text_b) for ex in train}
        unseen = [ex for ex in pool if (ex.text_a, ex.text_b) not in seen and ex.length in lengths]
        real = evaluate_examples(model, [ex for ex in valid if ex.length in lengths])
        ours = evaluate_examples(model, unseen)
        cells = [f"{100 * real.accuracy(k):.1f} / {100 * ours.accuracy(k):.1f}" for k in lengths]
        pooled = f"{100 * real.pooled():.1f} / {100 * ours.pooled():.1f}"
        name = f"{header['model']['cell']} seed {cfg.seed}"
        print(f"| {name} | " + " | ".join(cells) + f" | {pooled} |")
        print("|   pairs | " + " | ".join(f"{real.total.get(k, 0)} / {ours.total.get(k, 0)}" for k in lengths) + " | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
