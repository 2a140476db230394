"""Random formula pairs labelled with their relation, written in the layout of Bowman et al. (2015).

For every length bucket ``k`` (0 … 12) the generator draws pairs whose larger operator count is ``k``
(bucket 12: between 12 and ``max_ops``), labels them from their truth sets
(:func:`onlstm.logic.relations.relation_of_sets`) and splits them into ``test{k}`` and ``train{k}``.

How a pair is drawn (documented so that results can be compared):

* the larger operator count ``m`` is ``k`` (bucket 12: uniform in ``12 … max_ops``); a fair coin decides
  whether ``A`` or ``B`` has ``m`` operators, the other side gets a count uniform in ``0 … m``;
* a formula with ``n`` operators is ``( not X )`` with probability ``not_prob`` (``X`` has ``n - 1``),
  otherwise ``( L ( op R ) )`` with ``op`` uniform in ``and``/``or`` and the ``n - 1`` remaining operators
  split uniformly between ``L`` and ``R``; variables are uniform over ``a`` … ``f``;
* ``mix='original'`` follows the original training files instead (measured once, written below as the
  ``ORIGINAL_*`` tables; what they hold and how well the result matches: docs/logic.md, "Data"): the
  smaller side's count, ``not_prob`` (0.43), the training part's size per bucket, and each file's label
  shares (picked by :func:`fill_to_shares` from twice as many candidates);
* always-true or always-false formulas are redrawn unless ``allow_degenerate`` (the original data has
  none); a pair already drawn for the bucket is redrawn unless ``allow_duplicates``, so train and test
  never share a pair (small buckets may come out smaller than asked; the summary says so).

``balance_labels``: random pairs are dominated by ``#``. With balancing, a pool of ``pool_factor ×`` the
pairs wanted is drawn and :func:`water_fill` keeps the label counts as equal as the pool allows (rare
labels keep all their candidates). The random stream of bucket ``k`` depends only on ``(seed, k)``.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..config import Config, ConfigError, option, seed_option
from .data import LAST_BUCKET, write_file
from .formulas import BINARY_OPERATORS, EMPTY_SET, FULL_SET, VARIABLE_TRUTH_SETS, VARIABLES, Formula, parse
from .relations import RELATIONS, relation_of_sets

MIXES = ("uniform", "original")

# The original training files (Bowman et al. 2015, train0 ... train6) measured once: for a pair whose larger
# side has k operators, the share of pairs whose smaller side has 0, 1, ..., k operators ...
ORIGINAL_SMALLER_SIDE: dict[int, tuple[float, ...]] = {
    0: (1.0,),
    1: (0.404, 0.596),
    2: (0.408, 0.465, 0.128),
    3: (0.464, 0.359, 0.123, 0.053),
    4: (0.493, 0.315, 0.088, 0.072, 0.033),
    5: (0.479, 0.291, 0.079, 0.064, 0.058, 0.029),
    6: (0.456, 0.275, 0.073, 0.059, 0.054, 0.057, 0.025),
}
# ... the number of pairs in each file ...
ORIGINAL_TRAIN_SIZES: dict[int, int] = {0: 30, 1: 2319, 2: 12451, 3: 23252, 4: 30373, 5: 34152, 6: 32952}
# ... the share of each label (in RELATIONS order: = < > ^ | v #) in each file ...
ORIGINAL_LABELS: dict[int, tuple[float, ...]] = {
    0: (0.167, 0.0, 0.0, 0.0, 0.0, 0.0, 0.833),
    1: (0.025, 0.099, 0.098, 0.016, 0.052, 0.052, 0.658),
    2: (0.018, 0.103, 0.100, 0.014, 0.089, 0.087, 0.590),
    3: (0.020, 0.109, 0.111, 0.015, 0.101, 0.100, 0.545),
    4: (0.020, 0.106, 0.108, 0.020, 0.103, 0.104, 0.539),
    5: (0.023, 0.106, 0.106, 0.022, 0.104, 0.106, 0.534),
    6: (0.021, 0.106, 0.109, 0.021, 0.109, 0.109, 0.526),
}
# ... and the share of 'not' among all operators of all their formulas.
ORIGINAL_NOT_SHARE = 0.43
# Candidates drawn per pair kept when the original mix matches the original label shares: random pairs have
# more '#' (about 67%) than the original files (53-66%), so a pool twice as large is enough.
ORIGINAL_POOL_FACTOR = 2


def original_smaller_side(bucket: int) -> tuple[float, ...]:
    """Weights of the smaller side's operator count 0 ... ``bucket`` in the original mix."""
    if bucket in ORIGINAL_SMALLER_SIDE:
        return ORIGINAL_SMALLER_SIDE[bucket]
    p0, p1 = ORIGINAL_SMALLER_SIDE[6][:2]
    rest = (1.0 - p0 - p1) / (bucket - 1)
    return (p0, p1, *([rest] * (bucket - 1)))


def original_train_share(bucket: int) -> float:
    """The size of ``train{bucket}`` in the original mix, relative to the largest original file."""
    return ORIGINAL_TRAIN_SIZES[min(bucket, 6)] / max(ORIGINAL_TRAIN_SIZES.values())


class Pair(NamedTuple):
    """One generated example: label, the two formulas as text, and their operator counts."""

    label: str
    a: str
    b: str
    ops_a: int
    ops_b: int


@dataclass
class GenerateConfig(Config):
    """Options of :func:`generate_dataset` (see the module docstring for what each does)."""

    section = "generate"

    per_length: int = option(1000, "pairs per length bucket k, train and test together")
    seed: int = seed_option(0, "random seed; same seed, same files")
    max_ops: int = option(
        12,
        "largest operator count of a formula; buckets 0 ... min(max_ops, 12) are written (above 12 all go to file 12)",
    )
    test_fraction: float = option(0.2, "share of each bucket written to test{k} (ignored when test_count is set)")
    test_count: int | None = option(
        None, "pairs per bucket written to test{k} instead of test_fraction (the rest goes to train{k})"
    )
    balance_labels: bool = option(
        False, "draw pool_factor times more distinct pairs and keep label counts as equal as possible"
    )
    pool_factor: int = option(10, "with balance_labels: candidates drawn per requested pair")
    mix: str = option(
        "uniform",
        "uniform: the smaller side's operator count uniform in 0..k, equal bucket sizes; original: the length "
        "mix, bucket sizes and 'not' share of the original training files",
        choices=MIXES,
    )
    not_prob: float | None = option(
        None, "probability that an operator node is 'not'", default_text="0.5; with mix original 0.43"
    )
    allow_degenerate: bool = option(
        False, "keep formulas that are always true or always false (the original data has none)"
    )
    allow_duplicates: bool = option(False, "allow the same pair twice in a bucket")
    max_tries_factor: int = option(
        20, "give up on a bucket after max_tries_factor x pairs wanted draws (small buckets run out)", flag=False
    )

    def validate(self) -> None:
        """Raise :class:`ConfigError` (a ValueError) naming the bad option and its allowed range."""
        if self.per_length < 1:
            raise ConfigError(f"per_length must be >= 1, got {self.per_length}")
        if self.max_ops < 0:
            raise ConfigError(f"max_ops must be >= 0, got {self.max_ops}")
        if not 0.0 <= self.test_fraction <= 1.0:
            raise ConfigError(f"test_fraction must be in [0, 1], got {self.test_fraction}")
        if self.test_count is not None and not 0 <= self.test_count <= self.per_length:
            raise ConfigError(f"test_count must be in [0, per_length={self.per_length}], got {self.test_count}")
        if self.not_prob is not None and not 0.0 <= self.not_prob <= 1.0:
            raise ConfigError(f"not_prob must be in [0, 1], got {self.not_prob}")
        if self.pool_factor < 1 or self.max_tries_factor < 1:
            raise ConfigError("pool_factor and max_tries_factor must be >= 1")

    @property
    def not_probability(self) -> float:
        """``not_prob``, or its default for the mix."""
        if self.not_prob is not None:
            return self.not_prob
        return ORIGINAL_NOT_SHARE if self.mix == "original" else 0.5

    def bucket_sizes(self, bucket: int) -> tuple[int, int]:
        """``(test, train)`` pairs wanted in ``bucket``: ``per_length`` split by ``test_count`` or
        ``test_fraction``; with the original mix the training part scaled as the original files."""
        n_test = self.test_count if self.test_count is not None else round(self.test_fraction * self.per_length)
        n_train = self.per_length - n_test
        if self.mix == "original":
            n_train = round(n_train * original_train_share(bucket))
        return n_test, n_train


@dataclass
class FileReport:
    """What was written to one file."""

    name: str
    n_pairs: int
    labels: Counter = field(default_factory=Counter)


@dataclass
class BucketReport:
    """What was generated for one length bucket."""

    bucket: int
    wanted: int
    drawn: int
    seconds: float
    files: list[FileReport] = field(default_factory=list)

    @property
    def n_pairs(self) -> int:
        return sum(f.n_pairs for f in self.files)


@dataclass
class GenerationReport:
    """Summary of a :func:`generate_dataset` run."""

    out_dir: Path
    buckets: list[BucketReport]
    seconds: float

    @property
    def n_pairs(self) -> int:
        return sum(b.n_pairs for b in self.buckets)

    def label_counts(self, split: str | None = None) -> Counter:
        """Label counts over all files, or over the files of one split (``train``/``test``)."""
        total: Counter = Counter()
        for b in self.buckets:
            for f in b.files:
                if split is None or f.name.startswith(split):
                    total.update(f.labels)
        return total


# --------------------------------------------------------------------------- formulas


def random_formula_text(n_ops: int, rng: random.Random, not_prob: float = 0.5) -> tuple[str, int]:
    """A random formula with exactly ``n_ops`` operators: ``(text, truth set)``.

    Builds the text and the truth set together (no parse), which makes the generator fast.
    """
    if n_ops == 0:
        v = VARIABLES[rng.randrange(len(VARIABLES))]
        return v, VARIABLE_TRUTH_SETS[v]
    if rng.random() < not_prob:
        text, ts = random_formula_text(n_ops - 1, rng, not_prob)
        return f"( not {text} )", FULL_SET ^ ts
    op = BINARY_OPERATORS[rng.randrange(2)]
    n_left = rng.randrange(n_ops)
    lt, ls = random_formula_text(n_left, rng, not_prob)
    rt, rs = random_formula_text(n_ops - 1 - n_left, rng, not_prob)
    return f"( {lt} ( {op} {rt} ) )", (ls & rs) if op == "and" else (ls | rs)


def random_formula(n_ops: int, rng: random.Random, not_prob: float = 0.5) -> Formula:
    """A random :class:`~onlstm.logic.formulas.Formula` with exactly ``n_ops`` operators."""
    return parse(random_formula_text(n_ops, rng, not_prob)[0])


def _draw_formula(n_ops: int, rng: random.Random, cfg: GenerateConfig) -> tuple[str, int]:
    """A random formula, redrawn while it is degenerate (unless allowed)."""
    while True:
        text, ts = random_formula_text(n_ops, rng, cfg.not_probability)
        if cfg.allow_degenerate or ts not in (EMPTY_SET, FULL_SET):
            return text, ts


def _draw_op_counts(bucket: int, rng: random.Random, max_ops: int, mix: str = "uniform") -> tuple[int, int]:
    """Operator counts ``(ops_a, ops_b)`` of a pair in ``bucket`` (see the module docstring)."""
    longest = bucket if bucket < LAST_BUCKET else rng.randint(LAST_BUCKET, max(LAST_BUCKET, max_ops))
    if mix == "original":
        other = rng.choices(range(longest + 1), weights=original_smaller_side(longest))[0]
    else:
        other = rng.randint(0, longest)
    return (longest, other) if rng.random() < 0.5 else (other, longest)


def draw_pair(bucket: int, rng: random.Random, cfg: GenerateConfig) -> Pair:
    """One random labelled pair whose larger operator count puts it in ``bucket``."""
    ops_a, ops_b = _draw_op_counts(bucket, rng, cfg.max_ops, cfg.mix)
    a, sa = _draw_formula(ops_a, rng, cfg)
    b, sb = _draw_formula(ops_b, rng, cfg)
    return Pair(relation_of_sets(sa, sb), a, b, ops_a, ops_b)


# --------------------------------------------------------------------------- buckets


def _draw_distinct(bucket: int, wanted: int, rng: random.Random, cfg: GenerateConfig) -> tuple[list[Pair], int]:
    """Up to ``wanted`` pairs (distinct unless allowed) and the number of draws it took."""
    pairs: list[Pair] = []
    seen: set[tuple[str, str]] = set()
    max_tries = cfg.max_tries_factor * wanted
    tries = 0
    while len(pairs) < wanted and tries < max_tries:
        tries += 1
        p = draw_pair(bucket, rng, cfg)
        if not cfg.allow_duplicates:
            key = (p.a, p.b)
            if key in seen:
                continue
            seen.add(key)
        pairs.append(p)
    return pairs, tries


def _by_label(pairs: list[Pair]) -> dict[str, list[Pair]]:
    """The pairs of each label (in :data:`RELATIONS` order), each list in the pairs' order."""
    by_label: dict[str, list[Pair]] = {lab: [] for lab in RELATIONS}
    for p in pairs:
        by_label[p.label].append(p)
    return by_label


def water_fill(pairs: list[Pair], n: int) -> list[Pair]:
    """Pick ``n`` of ``pairs`` (in their order) with the label counts as equal as possible.

    Each label gets ``min(available, level)`` pairs, ``level`` as high as ``n`` allows; the
    remainder goes, one each, to the labels with spare pairs in :data:`RELATIONS` order.
    """
    by_label = _by_label(pairs)
    sizes = {lab: len(v) for lab, v in by_label.items()}
    if sum(sizes.values()) <= n:
        return list(pairs)
    level = 0
    while sum(min(s, level + 1) for s in sizes.values()) <= n:
        level += 1
    quota = {lab: min(s, level) for lab, s in sizes.items()}
    spare = n - sum(quota.values())
    for lab in RELATIONS:
        if spare and sizes[lab] > quota[lab]:
            quota[lab] += 1
            spare -= 1
    return [p for lab in RELATIONS for p in by_label[lab][: quota[lab]]]


def fill_to_shares(pairs: list[Pair], n: int, shares: tuple[float, ...]) -> list[Pair]:
    """Pick ``n`` of ``pairs`` (in their order) with label ``RELATIONS[i]`` at about ``shares[i]``: each
    label gets ``round(n * share)`` pairs or all it has; the pairs still missing go one at a time to the
    label, among those with candidates left, that is furthest below its share (labels with share 0 last)."""
    by_label = _by_label(pairs)
    share = dict(zip(RELATIONS, shares))
    quota = {lab: min(len(by_label[lab]), round(n * share[lab])) for lab in RELATIONS}
    for _ in range(min(n, len(pairs)) - sum(quota.values())):
        spare = [lab for lab in RELATIONS if len(by_label[lab]) > quota[lab]]
        lab = min(spare, key=lambda lab: (quota[lab] + 1) / share[lab] if share[lab] > 0 else float("inf"))
        quota[lab] += 1
    return [p for lab in RELATIONS for p in by_label[lab][: quota[lab]]][:n]


def generate_bucket(bucket: int, cfg: GenerateConfig) -> tuple[list[Pair], int]:
    """The shuffled pairs of one bucket and the number of draws it took."""
    rng = random.Random(f"onlstm-logic/{cfg.seed}/{bucket}")
    wanted = sum(cfg.bucket_sizes(bucket))
    if cfg.balance_labels:
        pool, tries = _draw_distinct(bucket, cfg.pool_factor * wanted, rng, cfg)
        pairs = water_fill(pool, wanted)
    elif cfg.mix == "original":
        pool, tries = _draw_distinct(bucket, ORIGINAL_POOL_FACTOR * wanted, rng, cfg)
        pairs = fill_to_shares(pool, wanted, ORIGINAL_LABELS[min(bucket, 6)])
    else:
        pairs, tries = _draw_distinct(bucket, wanted, rng, cfg)
    rng.shuffle(pairs)
    return pairs, tries


def _n_test(bucket: int, n_pairs: int, cfg: GenerateConfig) -> int:
    """How many of the ``n_pairs`` drawn for ``bucket`` go to its test file: as asked, or in proportion
    when the bucket ran out of distinct pairs."""
    n_test, n_train = cfg.bucket_sizes(bucket)
    return min(n_test, round(n_test * n_pairs / max(n_test + n_train, 1)))


def bucket_range(max_ops: int) -> range:
    """The buckets written for ``max_ops``: 0 … min(max_ops, 12)."""
    return range(min(max_ops, LAST_BUCKET) + 1)


# --------------------------------------------------------------------------- dataset


def format_label_counts(counts: Counter) -> str:
    """``'= 3.1%  < 10.0% …'``: the share of each label, in :data:`RELATIONS` order."""
    total = sum(counts.values()) or 1
    return "  ".join(f"{lab} {100.0 * counts.get(lab, 0) / total:4.1f}%" for lab in RELATIONS)


def _write_pairs(path: Path, pairs: list[Pair]) -> None:
    """Write pairs in the line format ``LABEL<TAB>A<TAB>B`` (``\\n`` line ends)."""
    write_file(path, ((p.label, p.a, p.b) for p in pairs))


def generate_dataset(
    out_dir: str | Path, cfg: GenerateConfig, log: Callable[[str], None] | None = None
) -> GenerationReport:
    """Generate and write ``train{k}``/``test{k}`` for every bucket into ``out_dir``.

    ``log`` (e.g. ``print``) receives one summary line per bucket. Returns a
    :class:`GenerationReport` with the counts and label distributions.
    """
    cfg.validate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    reports = []
    for bucket in bucket_range(cfg.max_ops):
        t0 = time.perf_counter()
        pairs, tries = generate_bucket(bucket, cfg)
        n_test = _n_test(bucket, len(pairs), cfg)
        report = BucketReport(bucket, sum(cfg.bucket_sizes(bucket)), tries, 0.0)
        for split, chunk in (("train", pairs[n_test:]), ("test", pairs[:n_test])):
            _write_pairs(out / f"{split}{bucket}", chunk)
            report.files.append(FileReport(f"{split}{bucket}", len(chunk), Counter(p.label for p in chunk)))
        report.seconds = time.perf_counter() - t0
        reports.append(report)
        if log is not None:
            log(_bucket_line(report))
    return GenerationReport(out, reports, time.perf_counter() - start)


def _bucket_line(r: BucketReport) -> str:
    """One summary line for a bucket: sizes, shortfall, speed, label shares."""
    sizes = "  ".join(f"{f.name:<7} {f.n_pairs:>6}" for f in r.files)
    short = f" (only {r.n_pairs} distinct of {r.wanted} wanted)" if r.n_pairs < r.wanted else ""
    labels = sum((f.labels for f in r.files), Counter())
    rate = r.drawn / r.seconds if r.seconds > 0 else float("inf")
    return f"{sizes}  | {format_label_counts(labels)}  | {r.drawn} draws, {rate:,.0f}/s{short}"
