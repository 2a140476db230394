"""The mix of logic data files by file number: label shares, the share of 'not', tokens per pair and the
smaller side's operator count; to compare generated data (``onlstm logic generate --mix original``) with the
original training files.

    python examples/logic_mix.py ../shared/data/logic-train train 1-6
    python examples/logic_mix.py PROXY test 1-12
"""

from __future__ import annotations

import argparse
from collections import Counter

from onlstm.logic.data import read_examples
from onlstm.logic.formulas import to_tokens


def describe(path: str, split: str, first: int, last: int) -> list[str]:
    by_file: dict[int, list] = {}
    for ex in read_examples(path, split=split, buckets=range(first, last + 1)):
        by_file.setdefault(ex.file_number, []).append(ex)
    lines = []
    for k in sorted(by_file):
        pairs = by_file[k]
        n = len(pairs)
        labels = Counter(e.label for e in pairs)
        smaller = Counter(min(e.ops_a, e.ops_b) for e in pairs)
        tokens = sum(len(to_tokens(e.a)) + len(to_tokens(e.b)) for e in pairs)
        nots = sum(to_tokens(e.a).count("not") + to_tokens(e.b).count("not") for e in pairs)
        ops = sum(e.ops_a + e.ops_b for e in pairs)
        lines.append(
            f"{split}{k}: n={n} '#'={labels['#'] / n:.3f} '<'+'>'={(labels['<'] + labels['>']) / n:.3f} "
            f"'|'+'v'={(labels['|'] + labels['v']) / n:.3f} '='={labels['='] / n:.3f} not-share={nots / ops:.3f} "
            f"tokens/pair={tokens / n:.1f} smaller-side 0/1={smaller[0] / n:.2f}/{smaller[1] / n:.2f}"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="a folder of train{k}/test{k} files")
    ap.add_argument("split", choices=("train", "test"))
    ap.add_argument("lengths", help="first-last file numbers, e.g. 1-6")
    args = ap.parse_args()
    first, last = (int(x) for x in args.lengths.split("-"))
    print("\n".join(describe(args.path, args.split, first, last)))


if __name__ == "__main__":
    main()
