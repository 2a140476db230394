"""Marvin & Linzen (2018)'s test suite, generated from its grammar: the 22 cases of "Targeted Syntactic Evaluation
of Language Models" (EMNLP 2018), every pair (or NPI triple) its templates make, in the order they make them.

The full suite is a set of pickles in github.com/BeckyMarvin/LM_syneval (MIT licence, (c) 2018 Rebecca Marvin),
kept out of this project's shared data; the suite is a closed grammar over a small lexicon, so it is written here
instead (docs/syneval.md, "Marvin & Linzen's suite, generated"). The lexicon is the one of the EMNLP 2018 suite
(the repository's `src/template/Terminals.py` as the suite's sentences show it: "security guard", the NPI cases'
"taxi drivers" and the agreement cases' "television show" beside "show", which its later edits left out); the expansion follows the repository's `make_templates.py` as its output shows it,
quirks included: only a sentence's last phrase is checked against the words before it (a phrase, or its other
number, already there drops the sentence), the grammatical and the ungrammatical lists of a condition are made
apart and paired in order, and the cross-clause NPI case's intrusive sentence swaps the two determiners.
``tests/data/test_marvin_linzen.py`` holds every pair of the shared sample among those generated and pins the
published count of every condition; against the authors' pickles the output is the published suite item for item
(``docs/results/records/ml_published_check.py``).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..files import check_output_owner, publish_folder, write_text

_NOUNS = "author pilot surgeon farmer manager customer officer teacher senator consultant".split()
_EMBEDDED = "security_guard chef architect skater dancer minister taxi_driver assistant executive parent".split()
_THINGS = "movie book game song picture painting novel poem show".split()


def _words(text: str) -> list[str]:
    return [w.replace("_", " ") for w in text.split()]


AGREEMENT_WORDS: dict[str, list[str]] = {
    "D": ["the"], "C": ["that"], "IC": ["that"], "AND": ["and"],
    "MS": _NOUNS, "ES": _words(" ".join(_EMBEDDED)), "IS": [*_THINGS, "television show"],
    "MV": _words("laughs swims smiles is_tall is_old is_young is_short"),
    "EV": ["likes", "admires", "hates", "loves"],
    "IV": _words("is_good is_bad is_new is_popular is_unpopular brings_joy_to_people interests_people"),
    "P": _words("next_to behind in_front_of near to_the_side_of across_from"), "IP": ["from", "by"],
    "BS": ["mechanic", "banker"], "BV": ["said", "thought", "knew"], "ANPHR": ["himself", "herself"],
    "LMV": ["knows many different foreign languages", "likes to watch television shows", "is twenty three years old",
            "enjoys playing tennis with colleagues", "writes in a journal every day"],
    "RMV": ["hurt", "injured", "congratulated", "embarrassed", "disguised", "hated", "doubted"],
}  # fmt: skip
NPI_WORDS: dict[str, list[str]] = {
    "D": ["the"], "C": ["that"], "SD": ["the", "some"], "MOST": ["most", "many"], "NO": ["no", "few"],
    "MS": [n + "s" for n in _NOUNS], "ES": [n + "s" for n in _words(" ".join(_EMBEDDED))],
    "IS": [n + "s" for n in _THINGS], "EV": ["like", "admire", "hate", "love"],
    "PASTAUX": ["have"], "FUTAUX": ["will"], "NPI": ["ever"],
    "IPMV": ["been seen", "been appreciated", "been ignored", "gotten old"],
    "IFMV": ["be seen", "be appreciated", "be ignored", "get old"],
    "APMV": ["been popular", "been famous", "had children"], "AFMV": ["be popular", "be famous", "have children"],
}  # fmt: skip

#: Agreement cases: the slots, the subject's and the agreeing word's positions, and the attractor's (whose number
#: varies by condition).
AGREEMENT_CASES: dict[str, tuple[str, tuple[tuple[int, ...], tuple[int, ...]], tuple[int, ...]]] = {
    "obj_rel_across_anim": ("D MS C D ES EV MV", ((1,), (6,)), (4, 5)),
    "obj_rel_within_anim": ("D MS C D ES EV MV", ((4,), (5,)), (1, 6)),
    "obj_rel_across_inanim": ("D IS IC D ES EV IV", ((1,), (6,)), (4, 5)),
    "obj_rel_within_inanim": ("D IS IC D ES EV IV", ((4,), (5,)), (1, 6)),
    "subj_rel": ("D MS C EV D ES MV", ((1, 3), (6,)), (5,)),
    "prep_anim": ("D MS P D ES MV", ((1,), (5,)), (4,)),
    "prep_inanim": ("D IS IP D ES IV", ((1,), (5,)), (4,)),
    "obj_rel_no_comp_across_anim": ("D MS D ES EV MV", ((1,), (5,)), (3, 4)),
    "obj_rel_no_comp_within_anim": ("D MS D ES EV MV", ((3,), (4,)), (1, 5)),
    "obj_rel_no_comp_across_inanim": ("D IS D ES EV IV", ((1,), (5,)), (3, 4)),
    "obj_rel_no_comp_within_inanim": ("D IS D ES EV IV", ((3,), (4,)), (1, 5)),
    "simple_agrmt": ("D MS MV", ((1,), (2,)), ()),
    "sent_comp": ("D BS BV D MS MV", ((4,), (5,)), (1,)),
    "vp_coord": ("D MS MV AND MV", ((1, 2), (4,)), ()),
    "long_vp_coord": ("D MS LMV AND LMV", ((1, 2), (4,)), ()),
    "reflexives_across": ("D MS C D ES EV RMV ANPHR", ((1,), (7,)), (4, 5)),
    "simple_reflexives": ("D MS RMV ANPHR", ((1,), (3,)), ()),
    "reflexive_sent_comp": ("D BS BV D MS RMV ANPHR", ((4,), (6,)), (1,)),
}
#: NPI cases: the slots of the grammatical sentence in the past.
NPI_CASES = {
    "npi_across_anim": "NO MS C D ES EV PASTAUX NPI APMV",
    "npi_across_inanim": "NO IS C D ES EV PASTAUX NPI IPMV",
    "simple_npi_anim": "NO MS PASTAUX NPI APMV",
    "simple_npi_inanim": "NO IS PASTAUX NPI IPMV",
}
CASES = (*AGREEMENT_CASES, *NPI_CASES)

Row = tuple[str, str, str, str, "str | None"]  # case, condition, grammatical, ungrammatical, intrusive


def other_number(phrase: str, verb: bool) -> str:
    """A phrase in the other number, as the suite's templates write it: ``is X`` -> ``are X``, a verb loses its
    last letter (``knows many`` -> ``know many``), ``himself``/``herself`` -> ``themselves``, a noun gains ``s``."""
    first, *rest = phrase.split(" ")
    if first == "is":
        return " ".join(["are", *rest])
    if verb:
        return " ".join([first[:-1], *rest])
    return "themselves" if phrase.endswith("self") else phrase + "s"


def _last_phrase_fits(phrase: str, before: str, words: dict[str, list[str]]) -> bool:
    """Whether a sentence may end in ``phrase`` after ``before`` (its words and a space): not when the phrase is
    already there (as text), in either number, nor when it is a determiner or complementiser."""
    first, rest = phrase.split(" ")[0], " ".join(phrase.split(" ")[1:])
    repeated = phrase in before or f"{first}s {rest}" in before or f"{first[:-1]} {rest}" in before
    copula = (phrase.startswith("is") and "are " + phrase[3:] in before) or (
        phrase.startswith("are") and "is " + phrase[4:] in before
    )
    return not (repeated or copula or phrase in words["D"] or phrase in words["C"])


def _expand(slots: Sequence[list[str]], words: dict[str, list[str]], swap_determiners: bool = False) -> list[str]:
    """Every sentence of the slots' phrases, the first slot varying slowest, those :func:`_last_phrase_fits`
    refuses left out; ``swap_determiners``: each written ``D2 N1 C NO N2...`` from ``NO N1 C D2 N2...``, none left
    out (the cross-clause NPI case's intrusive sentence)."""
    out = []
    for *head, last in itertools.product(*slots):
        before = "".join(phrase + " " for phrase in head)
        if swap_determiners:
            tokens = before.split()
            out.append(" ".join([tokens[3], *tokens[1:3], tokens[0], *tokens[4:], last]))
        elif _last_phrase_fits(last, before, words):
            out.append(before + last)
    return out


def _agreement(case: str) -> Iterator[Row]:
    slots_text, (subject, agreeing), attractors = AGREEMENT_CASES[case]
    names = slots_text.split()
    base = [AGREEMENT_WORDS[n] for n in names]

    def switched(slots: list[list[str]], at: Sequence[int]) -> list[list[str]]:
        return [[other_number(p, names[i].endswith("V")) for p in s] if i in at else s for i, s in enumerate(slots)]

    label = lambda idx: "_".join(names[i] for i in idx)
    for number in ("sing", "plur"):
        for attractor in ("sing", "plur") if attractors else ("sing",):
            start = switched(base, attractors) if attractor == "plur" else base
            good = switched(start, subject + agreeing) if number == "plur" else start
            bad = switched(start, subject if number == "plur" else agreeing)
            condition = f"{number}_{label(subject + agreeing)}" + (
                f"_{attractor}_{label(attractors)}" * bool(attractors)
            )
            for g, b in zip(_expand(good, AGREEMENT_WORDS), _expand(bad, AGREEMENT_WORDS), strict=True):
                yield case, condition, g, b, None


def _npi(case: str) -> Iterator[Row]:
    simple = case.startswith("simple")
    for tense in ("past", "future"):
        names = NPI_CASES[case].split()
        if tense == "future":
            names = [{"PASTAUX": "FUTAUX", "APMV": "AFMV", "IPMV": "IFMV"}.get(n, n) for n in names]
        slots = {det: [NPI_WORDS[det if n == "NO" else n] for n in names] for det in ("NO", "SD", "MOST")}
        good = _expand(slots["NO"], NPI_WORDS)
        intrusive = _expand(slots["SD"], NPI_WORDS) if simple else _expand(slots["NO"], NPI_WORDS, True)
        bad = _expand(slots["MOST"], NPI_WORDS)
        for g, i, b in zip(good, intrusive, bad, strict=True):
            yield case, tense, g, b, i


def generate(cases: Sequence[str] = CASES) -> Iterator[Row]:
    """The suite's rows, case by case in the order given (:data:`CASES`: the agreement cases, then the NPI ones):
    ``(case, condition, grammatical, ungrammatical, intrusive)``, ``intrusive`` None outside the NPI cases."""
    for case in cases:
        yield from (_npi(case) if case in NPI_CASES else _agreement(case))


#: What `onlstm data marvin-linzen` writes: the rows as the TSV dump `onlstm syneval --data` reads (docs/syneval.md,
#: "Data"), whose columns these are.
FILE, KIND = "marvin_linzen.tsv", "marvin-linzen"
HEADER = ("case", "condition", "grammatical", "ungrammatical", "intrusive")


def write_suite(out: str | Path, cases: Sequence[str] = CASES, overwrite: bool = False) -> Counter:
    """Write ``out/marvin_linzen.tsv`` (a new or empty folder, or one this wrote; else ``overwrite``), all at
    once; the rows per case."""
    check_output_owner(out, KIND, overwrite=overwrite)
    rows = list(generate(cases))
    lines = ["\t".join(HEADER), *("\t".join((*row[:4], row[4] or "")) for row in rows)]
    publish_folder(out, KIND, lambda tmp: write_text(tmp / FILE, "\n".join(lines) + "\n"))
    return Counter(row[0] for row in rows)
