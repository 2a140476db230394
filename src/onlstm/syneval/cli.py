"""``onlstm syneval``: targeted syntactic evaluation of one or more language-model checkpoints."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import Settings, option
from ..errors import command_error
from ..files import check_output_owner, json_text, publish_folder, write_json
from ..flags import add_command, add_flags
from .config import SynevalConfig
from .data import PAPER_SOURCE, SynevalDataError, read_items, write_dump
from .evaluate import COMPARISON_NAMES, outcome_record, score_items, summarize

OUTPUT_KIND = "syneval"  # the marker of an --out folder it wrote (onlstm.files.publish_folder)


@dataclass(kw_only=True)
class SynevalArgs:
    checkpoint: list[Path] = option(
        help="language-model run directory (or a .safetensors file in one); repeat to compare models side by side",
        repeat=True,
    )
    data: Path | None = option(
        None,
        "sample TSV (case, grammatical, ungrammatical), TSV dump with a header, a <case>.pickle or the suite's "
        "templates/ folder",
    )
    suite: list[Path] | None = option(
        None,
        "a SyntaxGym test suite (JSON, as published) or a folder of them; repeat for several (instead of --data)",
        repeat=True,
    )
    config: Path | None = option(None, "YAML file (or preset name) with a syneval: section; flags win over it")
    json: bool = option(False, "print every number as one JSON object")
    out: Path | None = option(
        None,
        "folder for results.json (with every pair's scores), items.tsv and rows.png; with --suite: results.json "
        "and regions.csv",
    )
    overwrite: bool = option(False, "replace --out even when it holds files syneval did not write")


def register(subparsers) -> None:
    """Add ``onlstm syneval`` to the top-level ``subparsers``."""
    add_flags(
        add_command(subparsers, "syneval", _cmd_syneval, SynevalArgs), SynevalConfig, "syneval", "evaluation settings"
    )


def _cmd_syneval(args: argparse.Namespace) -> int:
    """targeted syntactic evaluation (Marvin & Linzen 2018 minimal pairs) of language models

    Does the language model give the grammatical sentence of a minimal pair the higher probability? Per case,
    per condition and in the paper's rows, with vocabulary coverage. Convention and formats: docs/syneval.md.
    """
    from ..device import runtime_device
    from ..saved import check_weights_choice

    settings = Settings.resolve({"syneval": SynevalConfig}, args.config, args, experiment="syneval")
    cfg = settings.build("syneval")
    for path in args.checkpoint:  # weights chosen (flag or file) for a --checkpoint that names one file: refused
        check_weights_choice(path, settings.given["syneval"].get("weights"))
    if args.data is None and args.suite is None:
        raise SynevalDataError("nothing to evaluate on: give --data (minimal pairs) or --suite (SyntaxGym test suites)")
    if args.data is not None and args.suite is not None:
        raise SynevalDataError("give either --data (minimal pairs) or --suite (SyntaxGym test suites), not both")
    if args.suite and cfg.word_only:  # a suite's predictions name their own regions: --word-only would be ignored
        raise SynevalDataError(
            "--word-only compares the first differing word of --data's minimal pairs; a --suite's predictions name "
            "the regions they compare: leave --word-only out"
        )
    if args.out:  # before any work: syneval writes only into a new or empty folder, or its own earlier output
        reads = [*args.checkpoint, *([args.data] if args.data else []), *(args.suite or [])]
        check_output_owner(args.out, OUTPUT_KIND, overwrite=args.overwrite, reads=reads)
    if args.suite:
        return run_suites(args, cfg)
    items = read_items(args.data)
    if not items:
        raise SynevalDataError(f"{args.data}: no minimal pairs found; is it the right file?")
    device = runtime_device(cfg)
    models = [evaluate_checkpoint(path, items, cfg, device) for path in args.checkpoint]
    report = {
        "data": str(args.data),
        "items": len(items),
        "cases": len({it.case for it in items}),
        "scoring": "first differing word" if cfg.word_only else "sentence (sum of log-probabilities)",
        "paper_source": PAPER_SOURCE,
        "models": [{k: v for k, v in m.items() if k != "outcomes"} for m in models],
    }
    if args.out:
        write_out(args.out, report, models, items)
    print(json_text(report) if args.json else format_report(report))
    return 0


def run_suites(args: argparse.Namespace, cfg: SynevalConfig) -> int:
    """``--suite``: every suite scored by every model; accuracy per prediction and suite (docs/syneval.md)."""
    from ..device import runtime_device
    from ..models.language_model import load_language_model_run
    from .syntaxgym import read_suite

    paths = [p for given in args.suite for p in (sorted(given.glob("*.json")) if given.is_dir() else [given])]
    if not paths:
        raise SynevalDataError(f"no *.json suite in {', '.join(map(str, args.suite))}")
    suites = [read_suite(path) for path in paths]  # all checked before any model is loaded
    device = runtime_device(cfg)
    models = []
    for path in args.checkpoint:
        run = load_language_model_run(path, cfg.weights, device, reads_sentences=True)
        models.append(_score_suites(run, str(path), suites, cfg.batch_size))
    report = {"suites": [s.path for s in suites], "models": models}
    if args.out:
        _write_suites_out(args.out, report)
    print(json_text(report, default=str) if args.json else format_suites(report))
    return 0


def _score_suites(run, name: str, suites, batch_size: int) -> dict:
    from .syntaxgym import evaluate_suite, sg_score

    start = time.perf_counter()
    score = lambda toks: run.model.surprisals(toks, batch_size, pretokenized=True)  # read by the model's reader
    try:
        results = [evaluate_suite(s, run.vocab, score, run.model.reader) for s in suites]
    except ValueError as exc:  # a vocabulary without <unk> meeting an unknown word, a malformed saved reader
        raise command_error(exc) from None
    return {"checkpoint": name, "cell": run.model.config.cell, "weights": str(run.weights),
            "vocab_size": len(run.vocab), "seconds": round(time.perf_counter() - start, 3), "suites": results,
            "sg_score": sg_score({r["suite"]: r["accuracy"] for r in results})}  # fmt: skip


def _write_suites_out(out: Path, report: dict) -> None:
    from ..files import write_text
    from .syntaxgym import regions_csv

    summary = {**report, "models": [{**m, "suites": [_no_regions(r) for r in m["suites"]]} for m in report["models"]]}
    csv = regions_csv([(m["checkpoint"], m["suites"]) for m in report["models"]])

    def write(tmp: Path) -> None:  # both files at once, in a folder marked as syneval's (the ownership rule)
        write_json(tmp / "results.json", summary, indent=1)
        write_text(tmp / "regions.csv", csv)

    publish_folder(out, OUTPUT_KIND, write)


def _no_regions(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "regions"}


def format_suites(report: dict) -> str:
    """Per model, per suite: items, accuracy (all predictions hold) on the scorable ones, each prediction's
    accuracy, words unknown, and the items not scorable with the regions that make them so."""
    lines = []
    for i, m in enumerate(report["models"]):
        lines.append(f"{model_name(m, i)}: {m['weights']}; vocabulary {m['vocab_size']} words; {m['seconds']:.1f} s")
        for r in m["suites"]:
            cov = r["covered_accuracy"]
            cov = f"{cov:.3f} on {r['covered_items']} covered" if cov is not None else "no item covered"
            oov = f"{len(r['oov_types'])} word types read as <unk>"
            scored = f"{r['scored_items']:>4} scored" + (f" of {r['items']}" if r["not_scorable_items"] else "")
            lines.append(f"  {r['suite']:<40} {scored}  accuracy {_acc(r['accuracy'])}, {cov} ({oov})")
            for p in r["predictions"]:
                lines.append(f"    {_acc(p['accuracy'])}  {p['formula']}")
            lines += _not_scorable(r)
        lines += _sg_lines(m["sg_score"])
    return "\n".join(lines)


def _sg_lines(sg: dict) -> list[str]:
    """The mean over every suite scored, and where Hu et al.'s (2020) suites are among them their SG score (their
    mean over their suites) and its circuits."""
    lines = [f"  mean over every suite scored: {sg['mean_all']:.3f}"] if sg["mean_all"] is not None else []
    if not sg["by_circuit"]:  # none of their suites scored: their score would say nothing of them
        return lines
    apart = [f"not scored: {', '.join(sg['not_scored'])}"] * bool(sg["not_scored"])
    apart += [f"left out by their rule: {', '.join(sg['left_out'])}"] * bool(sg["left_out"])
    circuits = ", ".join(f"{c} {v['score']:.3f} ({v['suites']})" for c, v in sg["by_circuit"].items())
    return [
        f"  SG score (Hu et al. 2020): {sg['score']:.3f} over {sg['suites']} of {sg['of']} suites"
        + (f" ({'; '.join(apart)})" if apart else ""),
        f"    by circuit (suites scored): {circuits}",
        *lines,
    ]


def _not_scorable(result: dict) -> list[str]:
    """One line for the items not scored: how many, and which region text the model reads nothing of."""
    if not result["not_scorable_items"]:
        return []
    texts = sorted({repr(g["content"]) for entry in result["not_scorable"] for g in entry["regions"]})
    numbers = ", ".join(str(entry["item_number"]) for entry in result["not_scorable"][:10])
    more = " ..." if result["not_scorable_items"] > 10 else ""
    return [
        f"    not scorable: {result['not_scorable_items']} items (the model reads nothing of the region text "
        f"{', '.join(texts[:5])}{' ...' if len(texts) > 5 else ''}): items {numbers}{more}"
    ]


def evaluate_checkpoint(path: Path, items, cfg: SynevalConfig, device) -> dict:
    """Load one run, score every item; the summary plus the per-comparison ``outcomes``."""
    from ..models.language_model import load_language_model_run
    from ..progress import progress_bar

    run = load_language_model_run(path, cfg.weights, device, reads_sentences=True)
    start = time.perf_counter()
    unique = len({s for it in items for s in it.sentences})
    with progress_bar(cfg.progress, total=unique, desc=f"syneval {path}", unit="sent", leave=False) as bar:
        try:
            options = {"word_only": cfg.word_only, "batch_size": cfg.batch_size, "share_prefixes": cfg.share_prefixes}
            outcomes, facts = score_items(run.model, run.vocab, items, **options, progress=bar.update)
        except ValueError as exc:  # the vocabulary's own checks raise plain ValueErrors
            raise command_error(exc) from None
    seconds = time.perf_counter() - start
    return {
        "checkpoint": str(path),
        "cell": run.model.config.cell,
        "weights": str(run.weights),
        "vocab_size": len(run.vocab),
        **facts,
        "oov_types": len(facts["oov"]),
        "seconds": round(seconds, 3),
        "sentences_per_s": round(facts["sentences"] / seconds, 1) if seconds > 0 else None,
        **summarize(outcomes),
        "outcomes": outcomes,
    }


def write_out(out: Path, report: dict, models: list[dict], items) -> None:
    """``results.json`` (the report plus every comparison's scores per model), ``items.tsv`` (the items as
    read, as a TSV dump) and ``rows.png`` (a bar per model and paper column for each row)."""
    from .plots import plot_rows

    pairs = [
        {**summary, "pairs": [outcome_record(o) for o in m["outcomes"]]} for summary, m in zip(report["models"], models)
    ]

    def write(tmp: Path) -> None:  # all three files appear at once (onlstm.files.publish_folder)
        write_json(tmp / "results.json", {**report, "models": pairs}, indent=1)
        write_dump(items, tmp / "items.tsv")
        plot_rows(report, tmp / "rows.png")

    publish_folder(out, OUTPUT_KIND, write)


def _acc(x: float | None) -> str:
    return "  -  " if x is None else f"{x:.3f}"


def _cells(tallies) -> str:
    """A column per tally: ``all / covered (n covered)`` accuracies."""
    cells = (f"{_acc(t['accuracy'])} {_acc(t['covered_accuracy'])} ({t['covered']:>4})" for t in tallies)
    return "".join(f" | {c:<22}" for c in cells)


def _heads(models: list[dict]) -> str:
    return "".join(f" | {model_name(m, i):<22}" for i, m in enumerate(models))


def model_name(m: dict, index: int) -> str:
    return f"[{index + 1}] {m['cell']}"


def format_report(report: dict) -> str:
    models = report["models"]
    lines = [f"data: {report['data']} ({report['items']} items, {report['cases']} cases); score: {report['scoring']}"]
    for i, m in enumerate(models):
        lines.append(
            f"{model_name(m, i)}: {m['weights']}; vocabulary {m['vocab_size']} words; "
            f"'.' appended: {'yes' if m['period'] else 'no (not in the vocabulary)'}; "
            f"{m['oov_types']} word types mapped to <unk>; {m['sentences']} sentences "
            f"({m['unique']} distinct) in {m['seconds']:.1f} s"
        )
    lines += ["", *format_rows(models), "", *format_cases(models)]
    return "\n".join(lines)


def format_rows(models: list[dict]) -> list[str]:
    """The paper's rows: per model accuracy on all pairs and on fully covered pairs, beside the paper."""
    lines = [
        "The paper's rows: accuracy on all pairs, on fully covered pairs (number covered); paper columns from",
        f"{PAPER_SOURCE}.",
        f"{'row':<62} {'pairs':>5}{_heads(models)} | paper ON-LSTM  LSTM",
    ]
    group = None
    for k, row in enumerate(models[0]["rows"]):
        if row["group"] != group:
            group = row["group"]
            lines.append(f"{group} dependency")
        cells = _cells(m["rows"][k] for m in models)
        lines.append(
            f"  {row['row']:<60} {row['pairs']:>5}{cells} |       {row['paper_onlstm']:.2f}  {row['paper_lstm']:.2f}"
        )
    return lines


def format_cases(models: list[dict]) -> list[str]:
    """Per case and comparison (and per condition where a case has several)."""
    lines = ["Per case: accuracy on all pairs, on fully covered pairs (number covered)"]
    lines.append(f"{'case':<62} {'pairs':>5}{_heads(models)}")
    for case, entry in models[0]["cases"].items():
        for comp, t in entry["comparisons"].items():
            cells = _cells(m["cases"][case]["comparisons"][comp] for m in models)
            label = case if comp == "g>u" else f"{case} ({COMPARISON_NAMES[comp]})"
            lines.append(f"{label:<62} {t['pairs']:>5}{cells}")
            conditions = entry["conditions"]
            if len(conditions) > 1:
                for cond in conditions:
                    cells = _cells(m["cases"][case]["conditions"][cond][comp] for m in models)
                    lines.append(f"  {cond:<60} {conditions[cond][comp]['pairs']:>5}{cells}")
    return lines
