"""SyntaxGym test suites (Gauthier et al. 2020; Hu et al. 2020): the published JSON format read and checked
(:func:`read_suite`), its prediction formulas parsed by a small grammar (:func:`parse_formula`; no ``eval``),
region surprisals from any surprisal function and the predictions' accuracy (:func:`evaluate_suite`; docs/
syneval.md, "SyntaxGym test suites")."""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..data.reader import PTB, TextReader, is_sentence_end
from ..errors import quote
from ..files import UTF8, read_regular
from .data import SynevalDataError

#: How a region's token surprisals become one number (the suite's ``meta.metric``; SyntaxGym's suites use sum).
METRICS: dict[str, Callable[[list[float]], float]] = {
    "sum": lambda xs: float(sum(xs)),
    "mean": lambda xs: statistics.fmean(xs) if xs else math.nan,
    "median": lambda xs: statistics.median(xs) if xs else math.nan,
    "max": lambda xs: max(xs) if xs else math.nan,
    "min": lambda xs: min(xs) if xs else math.nan,
    "range": lambda xs: max(xs) - min(xs) if xs else math.nan,
}
#: The largest formula read: tokens, and brackets open at once. The published suites' formulas have a few dozen
#: tokens and nest 3 deep; the parser and the evaluation recurse over the formula, so a longer or deeper one (a
#: hostile file) is refused before it can exhaust the stack.
MAX_FORMULA_TOKENS, MAX_FORMULA_DEPTH = 400, 40
#: ``=`` in a formula: approximately equal, |a - b| <= ATOL + RTOL * |b| (SyntaxGym's tolerances).
RTOL, ATOL = 1e-5, 1e-3


class FormulaError(SynevalDataError):
    """A prediction formula that does not parse or mixes numbers and truth values."""


# ---------------------------------------------------------------------------------------------------------------
# Formulas: region references (N;%condition%) or (*;%condition%), numbers, + -, one of < > = per comparison,
# & | (left to right, equal precedence), grouping with ( ) or [ ] (the published suites use brackets).

_TOKEN = re.compile(
    r"\s*(?:(?P<region>\(\s*(?P<num>\d+|\*)\s*;\s*%(?P<cond>[^%]+)%\s*\))"
    r"|(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<op>[-+<>=&|()\[\]]))"
)


@dataclass(frozen=True)
class Region:
    number: int | None  # None: * (every region of the condition)
    condition: str


@dataclass(frozen=True)
class Node:
    op: str  # "+", "-", "<", ">", "=", "&", "|"
    left: Formula
    right: Formula


Formula = Region | float | Node
_CLOSE = {"(": ")", "[": "]"}


def _tokens(text: str) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    pos, text = 0, text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise FormulaError(f"cannot read the formula {text!r} at character {pos + 1}: {text[pos : pos + 12]!r}")
        if m.group("region"):
            num = m.group("num")
            out.append(("region", Region(None if num == "*" else int(num), m.group("cond"))))
        elif m.group("number"):
            out.append(("number", float(m.group("number"))))
        else:
            out.append(("op", m.group("op")))
        pos = m.end()
        if len(out) > MAX_FORMULA_TOKENS:
            raise FormulaError(f"the formula {text[:60]!r}... has over {MAX_FORMULA_TOKENS} tokens; split it up")
    _check_depth(out, text)
    return out


def _check_depth(tokens: list[tuple[str, object]], text: str) -> None:
    depth = 0
    for kind, value in tokens:
        if kind == "op":
            depth += 1 if value in _CLOSE else -1 if value in _CLOSE.values() else 0
        if depth > MAX_FORMULA_DEPTH:
            raise FormulaError(f"the formula {text[:60]!r}... nests over {MAX_FORMULA_DEPTH} brackets deep")


class _Parser:
    """Recursive descent over the tokens: bool := cmp (('&'|'|') cmp)*; cmp := sum [('<'|'>'|'=') sum];
    sum := atom (('+'|'-') atom)*; atom := region | ['-'] number | '(' bool ')' | '[' bool ']'."""

    def __init__(self, text: str):
        self.text, self.toks, self.i = text, _tokens(text), 0

    def peek(self) -> tuple[str, object] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def error(self, what: str) -> FormulaError:
        return FormulaError(f"malformed formula {self.text!r}: {what}")

    def take_op(self, ops: str) -> str | None:
        tok = self.peek()
        if tok is not None and tok[0] == "op" and isinstance(tok[1], str) and tok[1] in ops:
            self.i += 1
            return str(tok[1])
        return None

    def parse(self) -> Formula:
        node = self.boolean()
        if self.peek() is not None:
            raise self.error(f"unexpected {self.peek()[1]!r} after a complete formula")  # type: ignore[index]
        return node

    def boolean(self) -> Formula:
        node = self.comparison()
        while op := self.take_op("&|"):
            node = Node(op, node, self.comparison())
        return node

    def comparison(self) -> Formula:
        node = self.sum()
        if op := self.take_op("<>="):
            node = Node(op, node, self.sum())
            if self.take_op("<>="):
                raise self.error("a chain of comparisons; group them with & and brackets")
        return node

    def sum(self) -> Formula:
        node, ops = self.atom(), ""
        while op := self.take_op("+-"):
            ops += op
            node = Node(op, node, self.atom())
        if "-" in ops and "+" in ops[ops.index("-") :]:
            # SyntaxGym's reference reads + before -, a - b + c as a - (b + c); read left to right, it is (a - b) + c
            raise self.error("a '+' after a '-' without brackets, which SyntaxGym reads as a - (b + c); bracket it")
        return node

    def atom(self) -> Formula:
        tok = self.peek()
        if tok is None:
            raise self.error("it ends where a region, a number or a bracket should be")
        self.i += 1
        kind, value = tok
        if kind in ("region", "number"):
            return value  # type: ignore[return-value]
        if value == "-" and (nxt := self.peek()) is not None and nxt[0] == "number":
            self.i += 1
            return -float(nxt[1])  # type: ignore[arg-type]
        if value in _CLOSE:
            node = self.boolean()
            if self.take_op(_CLOSE[str(value)]) is None:
                raise self.error(f"{value!r} is not closed by {_CLOSE[str(value)]!r}")
            return node
        raise self.error(f"unexpected {value!r} where a region, a number or a bracket should be")


def _kind(node: Formula, text: str) -> str:
    """'number' or 'truth'; a formula that mixes them is malformed."""
    if not isinstance(node, Node):
        return "number"
    left, right = _kind(node.left, text), _kind(node.right, text)
    want, gives = ("truth", "truth") if node.op in "&|" else ("number", "truth" if node.op in "<>=" else "number")
    if left != want or right != want:
        raise FormulaError(f"malformed formula {text!r}: {node.op!r} needs two {want}s on its sides")
    return gives


def parse_formula(text: str) -> Formula:
    """A SyntaxGym prediction formula as a tree; :class:`FormulaError` naming the formula when it does not
    parse or is not a truth value (a comparison, or comparisons joined by & and |)."""
    if not isinstance(text, str) or not text.strip():
        raise FormulaError(f"a prediction formula must be a non-empty string, got {text!r}")
    node = _Parser(text).parse()
    if _kind(node, text) != "truth":
        raise FormulaError(f"malformed formula {text!r}: it is a number, not a comparison")
    return node


def regions_of(node: Formula) -> set[Region]:
    if isinstance(node, Region):
        return {node}
    if isinstance(node, Node):
        return regions_of(node.left) | regions_of(node.right)
    return set()


def evaluate_formula(node: Formula, values: dict[tuple[str, int], float]):
    """The formula's value with ``values[(condition, region number)]`` (region surprisals of one item)."""
    if isinstance(node, Region):
        if node.number is None:
            return sum(v for (c, _), v in values.items() if c == node.condition)
        return values[(node.condition, node.number)]
    if not isinstance(node, Node):
        return node
    a, b = evaluate_formula(node.left, values), evaluate_formula(node.right, values)
    ops = {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "<": lambda: a < b,
        ">": lambda: a > b,
        "=": lambda: abs(a - b) <= ATOL + RTOL * abs(b),
        "&": lambda: a and b,
        "|": lambda: a or b,
    }
    return ops[node.op]()


# ---------------------------------------------------------------------------------------------------------------
# Suites


@dataclass
class Prediction:
    formula: str
    tree: Formula


@dataclass
class Suite:
    """A test suite: ``items[i] = (item number, {condition: [(region number, content), ...]})``."""

    name: str
    metric: str
    region_names: dict[int, str]
    predictions: list[Prediction]
    items: list[tuple[int, dict[str, list[tuple[int, str]]]]] = field(default_factory=list)
    path: str = ""


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise SynevalDataError(f"{where}: {what}; is it a SyntaxGym test suite (docs/syneval.md)?")


def _prediction(entry, where: str) -> Prediction:
    """A prediction: ``{"type": "formula", "formula": ...}``, or the older ``relation`` form of one region."""
    _need(isinstance(entry, dict), where, "a prediction is not an object")
    if "formula" in entry:
        _need(entry.get("type", "formula") == "formula", where, f"unknown prediction type {entry.get('type')!r}")
        text = entry["formula"]
    else:
        ops = {"greaterthan": ">", "lessthan": "<", "equal": "="}
        _need(
            isinstance(entry.get("relation"), str) and entry["relation"] in ops,
            where,
            "a prediction has neither a formula nor a known relation",
        )
        r, op = entry.get("region_number"), ops[entry["relation"]]
        text = f"({r};%{entry.get('l_operand')}%) {op} ({r};%{entry.get('r_operand')}%)"
    try:
        return Prediction(text, parse_formula(text))
    except FormulaError as exc:
        raise FormulaError(f"{where}: {exc}") from None


def _item(entry, where: str, regions: dict[int, str]) -> tuple[int, dict[str, list[tuple[int, str]]]]:
    _need(isinstance(entry, dict) and isinstance(entry.get("conditions"), list), where, "an item without conditions")
    number, conditions = entry.get("item_number"), {}
    # a float (1.5, or 2.0) is a number but names no item: said as such, not "not a number"; a whole number written
    # as text ("3") is read as that number, so that "3" and 3 are one item (the duplicate check below sees them)
    if isinstance(number, str) and number.strip().isdecimal():
        number = int(number)
    _need(isinstance(number, int) and not isinstance(number, bool), where,
          f"item_number must be a whole number such as 3, got {quote(number, 40)}")  # fmt: skip
    for cond in entry["conditions"]:
        _need(
            isinstance(cond, dict) and isinstance(cond.get("condition_name"), str), where, "a condition without a name"
        )
        name, at = cond["condition_name"], f"{where} item {number} condition {cond['condition_name']!r}"
        _need(name not in conditions, at, "the condition appears twice")
        rows = cond.get("regions")
        _need(isinstance(rows, list) and bool(rows), at, "no regions")
        parsed = [_region(r, at, regions) for r in rows]
        _need(len({n for n, _ in parsed}) == len(parsed), at, "a region number appears twice")
        conditions[name] = sorted(parsed)
    return number, conditions


def _region(entry, where: str, regions: dict[int, str]) -> tuple[int, str]:
    """A region's number and text; a region without ``content`` is empty, as SyntaxGym's own reader has it."""
    _need(isinstance(entry, dict), where, "a region is not an object")
    n, content = entry.get("region_number"), entry.get("content", "")
    _need(isinstance(n, int) and n in regions, where, f"region {quote(n, 40)} is not in region_meta")
    _need(
        isinstance(content, str), where, f"region {n}'s content must be a string (its text), got {quote(content, 40)}"
    )
    return int(n), content


def read_suite(path: str | Path) -> Suite:
    """A suite file in SyntaxGym's JSON format, checked: every prediction parses, every region a prediction
    names exists in every item; :class:`SynevalDataError` (a :class:`FormulaError` for a formula) naming the file
    and the problem."""
    path = Path(path)
    try:
        data = json.loads(read_regular(path, error=SynevalDataError).decode(UTF8))  # a FIFO would never end
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SynevalDataError(f"cannot read the suite {path}: {exc}") from None
    except RecursionError:
        raise SynevalDataError(f"cannot read the suite {path}: its JSON nests too deep for a test suite") from None
    where = str(path)
    _check_text(data, where)
    _need(isinstance(data, dict), where, "not a JSON object")
    # the published suites all have meta, and SyntaxGym's reader needs it; its name and metric have defaults
    _need("meta" in data, where, "no meta")
    meta = data["meta"]
    _need(isinstance(meta, dict), where, "meta is not an object")
    metric = meta.get("metric", "sum")
    _need(
        isinstance(metric, str) and metric in METRICS, where, f"unknown metric {metric!r} (one of {', '.join(METRICS)})"
    )
    raw_regions = data.get("region_meta")
    _need(isinstance(raw_regions, dict) and bool(raw_regions), where, "no region_meta")
    try:
        regions = {int(k): str(v) for k, v in raw_regions.items()}
    except ValueError:
        raise SynevalDataError(f"{where}: region_meta's keys must be region numbers") from None
    _need(isinstance(data.get("predictions"), list) and bool(data["predictions"]), where, "no predictions")
    predictions = [_prediction(p, f"{where} prediction {i + 1}") for i, p in enumerate(data["predictions"])]
    _need(isinstance(data.get("items"), list) and bool(data["items"]), where, "no items")
    items = [_item(it, where, regions) for it in data["items"]]
    numbers = [n for n, _ in items]
    _need(len(set(numbers)) == len(numbers), where, "two items have the same item_number")
    suite = Suite(str(meta.get("name") or path.stem), metric, regions, predictions, items, where)
    _check_references(suite)
    return suite


def _check_text(data: object, where: str) -> None:
    """Every string of the suite can be written as UTF-8: JSON's ``\\ud800`` escapes give lone surrogates, which the
    results would only fail on once the scoring is done. Walked without recursion (the nesting is the file's)."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad = f"U+{ord(value[exc.start]):04X}"
                raise SynevalDataError(
                    f"{where}: the text {quote(value, 60)} holds a lone surrogate ({bad}, an unpaired \\u escape), "
                    "which is not a character; fix the suite's JSON"
                ) from None


def _check_references(suite: Suite) -> None:
    for p in suite.predictions:
        for number, conditions in suite.items:
            for ref in regions_of(p.tree):
                at = f"{suite.path} item {number}"
                _need(ref.condition in conditions, at, f"{p.formula!r} names condition {ref.condition!r}, absent here")
                present = {n for n, _ in conditions[ref.condition]}
                _need(ref.number is None or ref.number in present, at,
                      f"{p.formula!r} names region {ref.number} of {ref.condition!r}, absent here")  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# Tokens and scores

#: token lists -> per-token surprisal (bits) of each list's tokens then of its end (len + 1 values each), as
#: :meth:`onlstm.models.LanguageModel.surprisals` returns.
SurprisalFn = Callable[[list[list[str]]], Sequence[Sequence[float]]]

#: How a region is scored: by its tokens (none for a region the suite leaves empty), by the end of the sentence
#: (only sentence-final punctuation, which the model does not read), or not at all (text the model reads nothing
#: of: its item is not scorable).
BY_TOKENS, BY_END, UNREAD = "tokens", "end of sentence", "nothing read"


def region_tokens(suite: Suite, vocab, reader: TextReader = PTB) -> dict[tuple[int, str], list[list[str]]]:
    """Every region's text as the model reads it (``reader``: its training text's convention)."""
    return {
        (number, cond): [reader.read(content, vocab)[0] for _, content in regions]
        for number, conditions in suite.items
        for cond, regions in conditions.items()
    }


def region_kinds(regions: list[tuple[int, str]], tokens: list[list[str]]) -> list[str]:
    """How each region of one sentence is scored (:data:`BY_TOKENS`, :data:`BY_END`, :data:`UNREAD`). The last
    region with text, when it is only sentence-final punctuation the model does not read, asks whether the
    sentence may end there: the surprisal of the end of the sentence answers it."""
    last = max((k for k, (_, content) in enumerate(regions) if content.strip()), default=-1)
    kinds = []
    for k, ((_, content), toks) in enumerate(zip(regions, tokens)):
        if toks or not content.strip():
            kinds.append(BY_TOKENS)
        else:
            kinds.append(BY_END if k == last and is_sentence_end(content) else UNREAD)
    return kinds


def evaluate_suite(suite: Suite, vocab, surprisal: SurprisalFn, reader: TextReader = PTB) -> dict:
    """Region surprisals of every item and condition (the suite's metric over the region's tokens, read by
    ``reader``; the end of the sentence belongs to no region unless :func:`region_kinds` gives it one), each
    prediction's outcome per scorable item, accuracy per prediction and for the suite (the items where every
    prediction holds), the items not scorable (a region with text the model reads nothing of) and the word
    tokens outside ``vocab``."""
    tokens = region_tokens(suite, vocab, reader)
    keys = list(tokens)
    bits = surprisal([[t for region in tokens[k] for t in region] for k in keys])
    values: dict[int, dict[tuple[str, int], float]] = {}
    metric, rows, items, unread = METRICS[suite.metric], [], dict(suite.items), {}
    for key, sentence_bits in zip(keys, bits):
        start, (number, cond), sentence_bits = 0, key, [float(x) for x in sentence_bits]
        regions = items[number][cond]
        for (region, content), toks, kind in zip(regions, tokens[key], region_kinds(regions, tokens[key])):
            part = sentence_bits[start : start + len(toks)] if kind == BY_TOKENS else sentence_bits[-1:]
            start += len(toks)
            value = metric(part) if kind != UNREAD else None
            if kind == UNREAD:
                unread.setdefault(number, []).append({"condition": cond, "region": region, "content": content})
            else:
                values.setdefault(number, {})[(cond, region)] = value
            rows.append(dict(suite=suite.name, item_number=number, condition_name=cond, region_number=region,
                             region=suite.region_names.get(region, ""), content=content,
                             tokens=" ".join(toks) if kind != BY_END else reader.end, scored_by=kind,
                             metric_value=value, oovs=" ".join(t for t in toks if t not in vocab)))  # fmt: skip
    return _tally(suite, values, rows, tokens, vocab, unread)


def _tally(suite: Suite, values: dict, rows: list[dict], tokens: dict, vocab, unread: dict) -> dict:
    """Accuracies over the scorable items (no region the model reads nothing of) and over the *covered* ones
    among them (every token of every condition in ``vocab``); the items not scorable, named apart."""
    outcomes, covered = {}, {}
    for number, conditions in suite.items:
        if number not in unread:
            outcomes[number] = [bool(evaluate_formula(p.tree, values[number])) for p in suite.predictions]
            covered[number] = all(t in vocab for c in conditions for region in tokens[(number, c)] for t in region)
    n, held = len(outcomes), {number: all(o) for number, o in outcomes.items()}
    oov = sorted({t for toks in tokens.values() for region in toks for t in region if t not in vocab})
    n_covered = sum(covered.values())
    share = lambda count, total: count / total if total else None
    return {
        "suite": suite.name,
        "file": suite.path,
        "metric": suite.metric,
        "items": len(suite.items),
        "scored_items": n,
        "accuracy": share(sum(held.values()), n),
        "covered_items": n_covered,
        "covered_accuracy": share(sum(h for k, h in held.items() if covered[k]), n_covered),
        "predictions": [
            {"formula": p.formula, "accuracy": share(sum(o[k] for o in outcomes.values()), n)}
            for k, p in enumerate(suite.predictions)
        ],
        "not_scorable_items": len(unread),
        "not_scorable": [{"item_number": number, "regions": regions} for number, regions in unread.items()],
        "oov_types": oov,
        "outcomes": outcomes,
        "regions": rows,
    }


#: Hu et al. (2020)'s SyntaxGym score: the mean of the suites' accuracies, the suites matching this pattern left out
#: (their analysis, notebooks/main.py of cpllab/syntactic-generalization at 43f1f86: 31 of the 34 published suites),
#: and its six circuits, named by each suite's tag (its name up to the first ``-``, ``_`` or digit).
SG_LEFT_OUT = re.compile(r"^fgd-embed[34]|^gardenpath|^nn-nv")
CIRCUITS = {"npi": "Licensing", "reflexive": "Licensing", "fgd": "Long-Distance Dependencies",
            "cleft": "Long-Distance Dependencies", "number": "Agreement", "npz": "Garden-Path Effects",
            "mvrr": "Garden-Path Effects", "subordination": "Gross Syntactic State", "center": "Center Embedding"}  # fmt: skip


def circuit(suite: str) -> str | None:
    """The circuit of Hu et al. (2020) a suite belongs to, by its name's tag; None for a suite of none of them."""
    return CIRCUITS.get(re.split(r"[-_0-9]", suite, maxsplit=1)[0])


def sg_score(accuracies: dict[str, float | None]) -> dict:
    """Hu et al.'s aggregation of suite accuracies by suite name (``None``: a suite with no scorable item):
    ``score``, the mean over the suites their rule keeps that were scored, with ``suites`` counted, ``of`` those
    kept, ``not_scored`` and ``left_out`` (given, but outside their score) named; ``by_circuit``, the same mean
    per circuit; ``mean_all``, the mean over every suite scored, left-out ones included (None: nothing scored)."""
    counted = {name: acc for name, acc in accuracies.items() if not SG_LEFT_OUT.search(name)}
    scored = {name: acc for name, acc in counted.items() if acc is not None}
    mean = lambda xs: statistics.fmean(xs) if xs else None
    by_circuit: dict[str, list[float]] = {}
    for name, acc in scored.items():
        if (c := circuit(name)) is not None:  # a suite of one's own counts in the score, in no circuit
            by_circuit.setdefault(c, []).append(acc)
    return {
        "score": mean(list(scored.values())),
        "suites": len(scored),
        "of": len(counted),
        "not_scored": sorted(name for name in counted if name not in scored),
        "left_out": sorted(name for name in accuracies if name not in counted),
        "by_circuit": {c: {"score": mean(v), "suites": len(v)} for c, v in sorted(by_circuit.items())},
        "mean_all": mean([acc for acc in accuracies.values() if acc is not None]),
    }


REGION_COLUMNS = ("suite", "item_number", "condition_name", "region_number", "region", "content", "tokens",
                  "scored_by", "metric_value", "oovs")  # fmt: skip


def regions_csv(models: list[tuple[str | None, list[dict]]]) -> str:
    """The region surprisals of evaluated suites as CSV, one row per model, suite, item, condition and region
    (``models``: (model name or None, :func:`evaluate_suite` results); the model column only when named)."""
    import csv
    import io

    buf = io.StringIO()
    named = any(name is not None for name, _ in models)
    writer = csv.DictWriter(buf, fieldnames=(("model",) if named else ()) + REGION_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for name, results in models:
        for result in results:
            for row in result["regions"]:
                writer.writerow({**({"model": name} if named else {}), **row})
    return buf.getvalue()
