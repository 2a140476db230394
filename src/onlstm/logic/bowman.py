"""The distribution of Bowman et al.'s (2015) own data: :func:`draw_bowman_pair` draws one pair as their public
generator does (docs/logic.md, "The bowman mix"), and :func:`generate_bowman` fills every length bucket from one
stream of such draws, as they did.

Their generator, in words (this is our own code, written from that description):

* a pair picks 4 of the 6 variables at random; both formulas use only those 4;
* a formula is grown from a length budget of 12: a node is ``and`` or ``or`` with probability 2/9 each (else a
  variable), its two children get half the budget (integer division: 12, 6, 3, then 1, where only a variable
  fits), and every node, a variable too, is wrapped in ``not`` with probability 1/3;
* a pair with a tautology or a contradiction on either side is drawn again;
* a pair is filed under its larger operator count (12 holds 12 or more) and each file is deduplicated.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .formulas import EMPTY_SET, FULL_SET, VARIABLE_TRUTH_SETS, VARIABLES
from .relations import relation_of_sets

#: The length budget of a whole formula; a child gets ``budget // 2``; below 2 only a variable fits.
BUDGET = 12
#: ``and``, ``or`` and a leaf in the proportions 2 : 2 : 5 of the original generator's operator list.
P_AND, P_OR = 2 / 9, 2 / 9
#: Every node (a variable too) is negated with this probability (one ``not`` in the generator's list of three).
P_NOT = 1 / 3
#: Variables a pair may use (both formulas draw theirs from the same random subset of this size).
PAIR_VARIABLES = 4

Drawn = tuple[str, int, int]  # (text, truth set, operator count)


def draw_formula(variables: list[str], budget: int, rng: random.Random) -> Drawn:
    """One formula over ``variables`` grown from ``budget``: ``(text, truth set, operator count)``."""
    u = rng.random()
    if u < P_AND + P_OR and budget >= 2:
        left = draw_formula(variables, budget // 2, rng)
        right = draw_formula(variables, budget // 2, rng)
        op = "and" if u < P_AND else "or"
        truth = (left[1] & right[1]) if op == "and" else (left[1] | right[1])
        node: Drawn = (f"( {left[0]} ( {op} {right[0]} ) )", truth, left[2] + right[2] + 1)
    else:
        v = variables[rng.randrange(len(variables))]
        node = (v, VARIABLE_TRUTH_SETS[v], 0)
    if rng.random() < P_NOT:
        return f"( not {node[0]} )", FULL_SET ^ node[1], node[2] + 1
    return node


def draw_bowman_pair(rng: random.Random) -> tuple[str, str, str, int, int]:
    """One pair ``(label, a, b, ops_a, ops_b)`` of Bowman et al.'s distribution (degenerate sides redrawn)."""
    while True:
        variables = rng.sample(VARIABLES, PAIR_VARIABLES)
        a, b = draw_formula(variables, BUDGET, rng), draw_formula(variables, BUDGET, rng)
        if a[1] not in (EMPTY_SET, FULL_SET) and b[1] not in (EMPTY_SET, FULL_SET):
            return relation_of_sets(a[1], b[1]), a[0], b[0], a[2], b[2]


def generate_bowman(
    wanted: dict[int, int],
    rng: random.Random,
    max_draws: int,
    exclude: set[tuple[str, str]] | frozenset = frozenset(),
    keep: Callable[[str, str, str, int, int], bool] | None = None,
) -> tuple[dict[int, list[tuple[str, str, str, int, int]]], int]:
    """Pairs for each bucket of ``wanted`` (bucket -> count), from one stream of draws that stops when every
    bucket is full or after ``max_draws`` draws: ``({bucket: pairs in drawing order}, draws)``. A pair already
    kept in its bucket, or in ``exclude`` (``(a, b)`` texts, e.g. a training set's pairs), is passed over."""
    out: dict[int, list] = {k: [] for k in wanted}
    seen: set[tuple[str, str]] = set()
    missing, draws = sum(wanted.values()), 0
    while missing > 0 and draws < max_draws:
        draws += 1
        pair = draw_bowman_pair(rng)
        bucket = min(max(pair[3], pair[4]), BUDGET)
        key = (pair[1], pair[2])
        if bucket not in out or len(out[bucket]) >= wanted[bucket] or key in seen or key in exclude:
            continue
        if keep is not None and not keep(*pair):
            continue
        seen.add(key)
        out[bucket].append(pair)
        missing -= 1
    return out, draws
