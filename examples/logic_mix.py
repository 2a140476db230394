"""The mix of logic data files by file number: label shares, the share of 'not', tokens per pair and the
smaller side's operator count; to compare generated data (``onlstm logic generate --mix original``) with the
original training files.

    python examples/logic_mix.py ../shared/data/logic-train train 1-6
    python examples/logic_mix.py PROXY test 1-12
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from onlstm.errors import first_line
from onlstm.flags import OneLineParser
from onlstm.logic.data import LAST_BUCKET, read_examples
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
        share = f"{nots / ops:.3f}" if ops else "n/a"  # file 0: pairs of bare variables, no operator to share
        lines.append(
            f"{split}{k}: n={n} '#'={labels['#'] / n:.3f} '<'+'>'={(labels['<'] + labels['>']) / n:.3f} "
            f"'|'+'v'={(labels['|'] + labels['v']) / n:.3f} '='={labels['='] / n:.3f} not-share={share} "
            f"tokens/pair={tokens / n:.1f} smaller-side 0/1={smaller[0] / n:.2f}/{smaller[1] / n:.2f}"
        )
    return lines


def file_numbers(text: str) -> tuple[int, int]:
    """``'1-6'`` -> (1, 6), ``'5'`` -> (5, 5), within the file numbers 0 to 12 (a huge span was a MemoryError);
    anything else is a ValueError saying what to give."""
    first, dash, last = text.partition("-")
    try:
        span = (int(first), int(last) if dash else int(first))
    except ValueError:
        span = (-1, -1)
    if span[0] < 0 or span[1] < span[0] or span[1] > LAST_BUCKET:
        raise ValueError(
            f"lengths {text!r}: give first-last file numbers from 0 to {LAST_BUCKET}, e.g. 1-6, or one, e.g. 5"
        )
    return span


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="a folder of train{k}/test{k} files")
    ap.add_argument("split", choices=("train", "test"))
    ap.add_argument("lengths", help=f"first-last file numbers (0 to {LAST_BUCKET}), e.g. 1-6, or one, e.g. 5")
    args = ap.parse_args(argv)
    try:
        first, last = file_numbers(args.lengths)
        print("\n".join(describe(args.path, args.split, first, last)))
    except ValueError as exc:  # bad lengths, or data the reader refuses (LogicDataError): one line, no traceback
        print(f"logic_mix.py: {first_line(exc, 1000)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
