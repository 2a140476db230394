"""Marvin & Linzen's suite as `onlstm data marvin-linzen` generates it, against the published suite itself: every
case, condition and item of the authors' `<case>.pickle` files, in order.

    python docs/results/records/ml_published_check.py TEMPLATES

TEMPLATES: the `EMNLP2018/templates/` folder of github.com/BeckyMarvin/LM_syneval (the suite of the paper; the
repository's later `data/templates/` dropped a noun of the inanimate cases). The pickles are read by the project's
own reader (`onlstm.syneval.data.read_items`: plain data only, nothing in them run). Per case: identical, or how
many items differ and the first that does; exit status 0 when the two suites are the same item for item, 1 if not,
2 with one line when TEMPLATES cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from onlstm.data.marvin_linzen import generate
from onlstm.errors import EXIT_BAD_INPUT, EXIT_FINDING, EXIT_OK, OnlstmError
from onlstm.syneval.data import read_items


def by_condition(rows) -> dict[str, dict[str, list[tuple]]]:
    """case -> condition -> [(grammatical, ungrammatical, intrusive), ...] in the order given."""
    out: dict[str, dict[str, list[tuple]]] = defaultdict(lambda: defaultdict(list))
    for case, condition, *sentences in rows:
        out[case][condition].append(tuple(sentences))
    return out


def read_published(templates: Path) -> dict[str, dict[str, list[tuple]]]:
    """The authors' pickles (or any file `syneval --data` reads) as :func:`by_condition` arranges them."""
    items = read_items(templates)
    return by_condition((i.case, i.condition, i.grammatical, i.ungrammatical, i.intrusive) for i in items)


def compare(published: dict, generated: dict) -> list[str]:
    """One line per case of either side: ``identical (n items)`` or what differs; the last line the verdict."""
    lines, same = [], True
    for case in sorted(set(published) | set(generated)):
        pub, gen = published.get(case, {}), generated.get(case, {})
        if not pub or not gen:
            lines.append(f"{case}: only in the {'generated' if gen else 'published'} suite")
            same = False
            continue
        problems = [f"condition {c} only in one suite" for c in sorted(set(pub) ^ set(gen))]
        for c in sorted(set(pub) & set(gen)):
            differ = [k for k, (a, b) in enumerate(zip(pub[c], gen[c])) if a != b]
            if differ or len(pub[c]) != len(gen[c]):
                first = f", first at item {differ[0]}: {pub[c][differ[0]]} published" if differ else ""
                problems.append(f"{c}: {len(pub[c])} published, {len(gen[c])} generated, {len(differ)} differ{first}")
        n = sum(map(len, pub.values()))
        lines.append(f"{case}: identical ({n:,} items)" if not problems else f"{case}: " + "; ".join(problems))
        same = same and not problems
    lines.append("the same suite, item for item" if same else "the suites differ")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("templates", type=Path, help="LM_syneval's EMNLP2018/templates/ folder")
    args = ap.parse_args(argv)
    try:
        published = read_published(args.templates)
    except OnlstmError as exc:  # a folder without the pickles, a damaged or hostile one: the reader says which
        print(f"ml_published_check: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    lines = compare(published, by_condition(generate()))
    print("\n".join(lines))
    return EXIT_OK if lines[-1].startswith("the same") else EXIT_FINDING


if __name__ == "__main__":
    sys.exit(main())
