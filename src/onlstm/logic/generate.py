"""Random formula pairs labelled with their relation, written as ``train{k}``/``test{k}``: :func:`generate_dataset`.
How a pair is drawn, the ``original`` mix and label balancing: docs/logic.md, "Data".
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..config import Config, ConfigError, option, seed_option
from .bowman import generate_bowman
from .data import LAST_BUCKET, read_examples, write_file
from .formulas import BINARY_OPERATORS, EMPTY_SET, FULL_SET, VARIABLE_TRUTH_SETS, VARIABLES, Formula, parse
from .relations import RELATIONS, relation_of_sets

MIXES = ("uniform", "original", "bowman")

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


class Pair(NamedTuple):
    """One generated example: label, the two formulas as text, and their operator counts."""

    label: str
    a: str
    b: str
    ops_a: int
    ops_b: int


#: The most pairs a bucket may ask for (the original files hold fewer than 100,000 per bucket).
MAX_PER_LENGTH = 10_000_000


@dataclass
class GenerateConfig(Config):
    """Options of :func:`generate_dataset` (docs/logic.md, "Data", for what each does)."""

    section = "generate"

    per_length: int = option(  # bounded: a larger count ran for ever (distinct pairs run out long before)
        1000, "pairs per length bucket k, train and test together", ge=1, le=MAX_PER_LENGTH
    )
    seed: int = seed_option(0, "random seed; same seed, same files")
    max_ops: int = option(
        12,
        "largest operator count of a formula; buckets 0 ... min(max_ops, 12) are written (above 12 all go to file 12)",
        ge=0,
    )
    test_fraction: float = option(
        0.2, "share of each bucket written to test{k} (ignored when test_count is set)", ge=0, le=1
    )
    test_count: int | None = option(
        None, "pairs per bucket written to test{k} instead of test_fraction (the rest goes to train{k})"
    )
    balance_labels: bool = option(
        False, "draw pool_factor times more distinct pairs and keep label counts as equal as possible"
    )
    pool_factor: int = option(10, "with balance_labels: candidates drawn per requested pair", ge=1)
    mix: str = option(
        "uniform",
        "bowman: Bowman et al.'s own generator (4 variables per pair, trees grown by halving a length budget; "
        "the distribution of their train/test files); uniform: the smaller side's operator count uniform in 0..k, "
        "equal bucket sizes; original: another formula shape with the original files' length mix, bucket sizes "
        "and 'not' share (a test of robustness to the shape, not of Bowman's distribution)",
        choices=MIXES,
    )
    draws: int | None = option(
        None,
        "with mix bowman: stop after this many draws even if buckets are not full (Bowman et al. drew 500,000; "
        "with a large --per-length this reproduces their files' sizes)",
        default_text="max_tries_factor x pairs wanted",
        ge=1,
        le=10**9,
    )
    exclude: str | None = option(
        None,
        "a directory of train{k}/test{k} files (or one file) whose pairs are never generated, e.g. the training "
        "files, so that generated test pairs are all unseen",
    )
    not_prob: float | None = option(
        None, "probability that an operator node is 'not'", default_text="0.5; with mix original 0.43", ge=0, le=1
    )
    allow_degenerate: bool = option(
        False, "keep formulas that are always true or always false (the original data has none)"
    )
    allow_duplicates: bool = option(False, "allow the same pair twice in a bucket")
    max_tries_factor: int = option(
        20,
        "give up on a bucket after max_tries_factor x pairs wanted draws (small buckets run out)",
        flag=False,
        ge=1,
    )

    def validate(self) -> None:
        if self.test_count is not None and not 0 <= self.test_count <= self.per_length:
            raise ConfigError(f"test_count must be in [0, per_length={self.per_length}], got {self.test_count}")
        if self.mix == "bowman" and (self.balance_labels or self.not_prob is not None or self.allow_degenerate):
            raise ConfigError(
                "mix bowman draws labels, 'not' and degenerate formulas as Bowman et al.'s generator does: "
                "drop --balance-labels, --not-prob and --allow-degenerate"
            )
        if self.draws is not None and self.mix != "bowman":
            raise ConfigError("draws applies to mix bowman only (the other mixes fill each bucket on its own)")

    @property
    def not_probability(self) -> float:
        """``not_prob``, or its default for the mix."""
        return self.not_prob if self.not_prob is not None else ORIGINAL_NOT_SHARE if self.mix == "original" else 0.5

    def bucket_sizes(self, bucket: int) -> tuple[int, int]:
        """``(test, train)`` pairs wanted in ``bucket``: ``per_length`` split by ``test_count`` or
        ``test_fraction``; with the original mix the training part scaled as the original files."""
        n_test = self.test_count if self.test_count is not None else round(self.test_fraction * self.per_length)
        n_train = self.per_length - n_test
        if self.mix == "original":
            n_train = round(n_train * ORIGINAL_TRAIN_SIZES[min(bucket, 6)] / max(ORIGINAL_TRAIN_SIZES.values()))
        return n_test, n_train


class BucketReport(NamedTuple):
    """What was generated for one length bucket: the label counts of each file written (by file name)."""

    bucket: int
    wanted: int
    drawn: int
    seconds: float
    files: dict[str, Counter]

    @property
    def n_pairs(self) -> int:
        return sum(sum(c.values()) for c in self.files.values())


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
        return sum((c for b in self.buckets for name, c in b.files.items() if name.startswith(split or "")), Counter())


def random_formula_text(n_ops: int, rng: random.Random, not_prob: float = 0.5) -> tuple[str, int]:
    """A random formula with exactly ``n_ops`` operators: ``(text, truth set)``, built together (fast: no parse)."""
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


def draw_pair(bucket: int, rng: random.Random, cfg: GenerateConfig) -> Pair:
    """One random labelled pair whose larger operator count puts it in ``bucket`` (docs/logic.md, "Data")."""
    longest = bucket if bucket < LAST_BUCKET else rng.randint(LAST_BUCKET, max(LAST_BUCKET, cfg.max_ops))
    if cfg.mix == "original":
        other = rng.choices(range(longest + 1), original_smaller_side(longest))[0]
    else:
        other = rng.randint(0, longest)
    ops_a, ops_b = (longest, other) if rng.random() < 0.5 else (other, longest)
    a, sa = _draw_formula(ops_a, rng, cfg)
    b, sb = _draw_formula(ops_b, rng, cfg)
    return Pair(relation_of_sets(sa, sb), a, b, ops_a, ops_b)


def _draw_distinct(bucket: int, wanted: int, rng: random.Random, cfg: GenerateConfig) -> tuple[list[Pair], int]:
    """Up to ``wanted`` pairs (distinct unless allowed) and the number of draws it took."""
    pairs: list[Pair] = []
    seen: set[tuple[str, str]] = set()
    tries = 0
    while len(pairs) < wanted and tries < cfg.max_tries_factor * wanted:
        tries += 1
        p = draw_pair(bucket, rng, cfg)
        if cfg.allow_duplicates or (p.a, p.b) not in seen:
            seen.add((p.a, p.b))
            pairs.append(p)
    return pairs, tries


def water_fill(pairs: list[Pair], n: int) -> list[Pair]:
    """Pick ``n`` of ``pairs`` (in their order) with the label counts as equal as possible: one at a time to the
    label with the fewest so far among those with pairs left (ties: in :data:`RELATIONS` order)."""
    if len(pairs) <= n:
        return list(pairs)
    quota = dict.fromkeys(RELATIONS, 0)
    return _pick(pairs, n, quota, key=lambda lab: quota[lab])


def fill_to_shares(pairs: list[Pair], n: int, shares: tuple[float, ...]) -> list[Pair]:
    """Pick ``n`` of ``pairs`` (in their order) with label ``RELATIONS[i]`` at about ``shares[i]``: each
    label gets ``round(n * share)`` pairs or all it has; the pairs still missing go one at a time to the
    label, among those with candidates left, that is furthest below its share (labels with share 0 last)."""
    sizes, share = Counter(p.label for p in pairs), dict(zip(RELATIONS, shares))
    quota = {lab: min(sizes[lab], round(n * share[lab])) for lab in RELATIONS}
    key = lambda lab: (quota[lab] + 1) / share[lab] if share[lab] > 0 else float("inf")
    return _pick(pairs, min(n, len(pairs)), quota, key)[:n]


def _pick(pairs: list[Pair], n: int, quota: dict[str, int], key) -> list[Pair]:
    """Raise ``quota`` (pairs per label) one at a time up to ``n``, for the label with pairs left that ``key``
    puts first; then the first ``quota[label]`` pairs of each label, in :data:`RELATIONS` order."""
    by_label = {lab: [p for p in pairs if p.label == lab] for lab in RELATIONS}
    for _ in range(n - sum(quota.values())):
        quota[min((lab for lab in RELATIONS if len(by_label[lab]) > quota[lab]), key=key)] += 1
    return [p for lab in RELATIONS for p in by_label[lab][: quota[lab]]]


def generate_bucket(bucket: int, cfg: GenerateConfig) -> tuple[list[Pair], int]:
    """The shuffled pairs of one bucket (fewer than its size when it runs short) and the number of draws it took."""
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


def format_label_counts(counts: Counter) -> str:
    """``'= 3.1%  < 10.0% …'``: the share of each label, in :data:`RELATIONS` order."""
    total = sum(counts.values()) or 1
    return "  ".join(f"{lab} {100.0 * counts.get(lab, 0) / total:4.1f}%" for lab in RELATIONS)


def generate_dataset(
    out_dir: str | Path, cfg: GenerateConfig, log: Callable[[str], None] | None = None
) -> GenerationReport:
    """Generate and write ``train{k}``/``test{k}`` for every bucket into ``out_dir``; ``log`` (e.g. ``print``)
    receives one summary line per bucket."""
    cfg.validate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start, reports = time.perf_counter(), []
    for bucket, pairs, tries, seconds in _buckets(cfg):
        n_test, n_train = cfg.bucket_sizes(bucket)
        wanted = n_test + n_train
        n_test = min(n_test, round(n_test * len(pairs) / max(wanted, 1)))  # in proportion when the bucket ran short
        # Bowman et al. kept each bucket's pairs in drawing order and wrote the first 85% as train, the rest as
        # test: the pairs drawn often (short shapes) are found early, so their test files hold more rare shapes
        # than their train files; the other mixes are shuffled and split from the front
        n_train = len(pairs) - n_test
        train_part, test_part = (
            (pairs[:n_train], pairs[n_train:]) if cfg.mix == "bowman" else (pairs[n_test:], pairs[:n_test])
        )
        files = {}
        for name, chunk in ((f"train{bucket}", train_part), (f"test{bucket}", test_part)):
            write_file(out / name, (p[:3] for p in chunk))
            files[name] = Counter(p.label for p in chunk)
        reports.append(BucketReport(bucket, wanted, tries, seconds, files))
        if log is not None:
            log(_bucket_line(reports[-1]))
    return GenerationReport(out, reports, time.perf_counter() - start)


def _buckets(cfg: GenerateConfig) -> Iterator[tuple[int, list[Pair], int, float]]:
    """``(bucket, pairs, draws, seconds)`` for every bucket: each on its own, or (mix bowman) all from
    one stream of draws, as Bowman et al. made theirs (draws and seconds are then the whole stream's)."""
    buckets = range(min(cfg.max_ops, LAST_BUCKET) + 1)
    if cfg.mix != "bowman":
        for bucket in buckets:
            t0 = time.perf_counter()
            pairs, tries = generate_bucket(bucket, cfg)
            yield bucket, pairs, tries, time.perf_counter() - t0
        return
    t0 = time.perf_counter()
    wanted = {k: sum(cfg.bucket_sizes(k)) for k in buckets}
    rng = random.Random(f"onlstm-logic-bowman/{cfg.seed}")
    max_draws = cfg.draws or cfg.max_tries_factor * sum(wanted.values())
    drawn, draws = generate_bowman(wanted, rng, max_draws, excluded_pairs(cfg.exclude))
    seconds = time.perf_counter() - t0
    for bucket in buckets:
        yield bucket, [Pair(*p) for p in drawn[bucket]], draws, seconds  # in drawing order


def excluded_pairs(path: str | None) -> set[tuple[str, str]]:
    """The ``(a, b)`` texts of every pair in the files at ``path`` (none when ``path`` is None)."""
    if path is None:
        return set()
    return {(ex.text_a, ex.text_b) for ex in read_examples(path)}


def _bucket_line(r: BucketReport) -> str:
    sizes = "  ".join(f"{name:<7} {sum(c.values()):>6}" for name, c in r.files.items())
    short = f" (only {r.n_pairs} distinct of {r.wanted} wanted)" if r.n_pairs < r.wanted else ""
    rate = r.drawn / r.seconds if r.seconds > 0 else float("inf")
    labels = format_label_counts(sum(r.files.values(), Counter()))
    return f"{sizes}  | {labels}  | {r.drawn} draws, {rate:,.0f}/s{short}"
