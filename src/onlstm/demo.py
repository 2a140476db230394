"""``onlstm demo`` (docs/parsing.md): a grammar corpus, a language model trained by ``onlstm lm train``'s code
(preset ``lm/demo``) into a run directory, the induced trees scored against gold and the trivial baselines."""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import sys
import time
import warnings
from pathlib import Path

from .config import find_preset
from .data.grammar import Grammar
from .data.vocab import Vocab
from .demo_config import DemoConfig as DemoConfig
from .demo_config import demo_command as demo_command
from .errors import RunDirError
from .files import check_output_folder, json_text, owned_by, publish_folder, write_text
from .models.language_model import LanguageModel, load_language_model_run
from .parsing.baselines import score_baselines
from .parsing.induce import sentence_distances, trees_from_distances
from .parsing.metrics import evaluate
from .parsing.trees import to_brackets, unlabel
from .runs import RunDir, TrainResult
from .saved import WeightsNote

#: The corpus folder inside the demo's run directory (read by ``onlstm lm train --data-dir``).
DATA = "data"
DATA_KIND = "demo-corpus"  # its marker (onlstm.files.publish_folder)


def lm_settings(cfg: DemoConfig, quiet: bool = False) -> dict:
    """The language model's settings, as ``onlstm lm train --config demo`` with the demo's options as flags
    (``{"model": ..., "train": ...}``, what :func:`onlstm.lm.train.train` takes)."""
    from .lm.config import explicit_settings

    drop = cfg.dropout
    model = dict(emb_size=cfg.emb_size, hidden_sizes=list(cfg.hidden_sizes), chunk_size=cfg.chunk_size)
    model.update(master_input=cfg.master_input, dropout_in=drop, dropout_hidden=drop, dropout_out=drop)
    train = dict(seed=cfg.seed, time_limit=cfg.seconds / 60, batch_size=cfg.batch_size, bptt=cfg.bptt, lr=cfg.lr)
    train.update(threads=cfg.threads, progress=not quiet)
    # the preset's file, not its short name: a file called "demo" in the working folder would win over it
    return explicit_settings(find_preset("lm/demo")[1], {"model": {**model, "dropconnect": drop}, "train": train})


#: What a demo writes into its directory (an earlier demo's are replaced; anything else there is refused).
DEMO_FILES = re.compile(
    r"(config|vocab|history|results)\.json|log\.csv|model\.(best|last)\.safetensors|resume\.safetensors"
    r"|steps\.csv|onlstm\.lock|tensorboard|test_(gold|pred)\.txt|example\.(png|svg)|data|\..*\.tmp"
)


def check_demo_dir(out: str | Path) -> Path:
    """``--out`` of the demo, checked before any work: a new or empty writable directory, or an earlier demo's
    (replaced: it is made again in minutes) holding nothing but what the demo writes. An earlier demo is recognised
    by its header (the demo's settings or, stopped during training, its corpus folder inside it), or, stopped
    before that, by its marked corpus folder alone."""
    out_dir = check_output_folder(out)
    held = RunDir(out_dir).describe()
    config = RunDir(out_dir).header() if held else {}
    data = config.get("data") if isinstance(config.get("data"), dict) else {}
    if held and "demo" not in config and data.get("data_dir") != str((out_dir / DATA).resolve()):
        raise RunDirError(
            f"{out_dir} already holds a run that the demo did not make (found: {held}); the demo would "
            "overwrite it: choose another --out"
        )
    names = os.listdir(out_dir) if out_dir.is_dir() else []
    if not held and names and not (names == [DATA] and owned_by(out_dir / DATA, DATA_KIND)):
        raise RunDirError(
            f"--out {out_dir} is not empty and holds no demo (it holds {', '.join(map(repr, sorted(names)[:3]))}); "
            "the demo writes only into a new or empty directory, or an earlier demo's: choose another --out"
        )
    foreign = sorted(n for n in names if not DEMO_FILES.fullmatch(n))
    if foreign:
        raise RunDirError(
            f"--out {out_dir} holds an earlier demo and files the demo did not write ({', '.join(map(repr, foreign[:3]))}"
            "); the demo would replace the directory: move them, or choose another --out"
        )
    return out_dir


def _write_corpus(out_dir: Path, splits: dict) -> None:
    """The sentences as a PTB-layout corpus, one sentence a line (what onlstm.data.ptb reads), in ``out_dir/data``
    all at once (an earlier demo's is replaced only when the new one is whole)."""

    def write(tmp: Path) -> None:
        for split, trees in splits.items():
            write_text(tmp / f"ptb.{split}.txt", "".join(" ".join(t.leaves()) + "\n" for t in trees))

    publish_folder(out_dir / DATA, DATA_KIND, write)


def _clear_earlier_demo(out_dir: Path) -> None:
    # lm train refuses a directory with a run in it, and the old best weights would be parsed with when no epoch
    # ends this time; check_demo_dir made sure that every name here is the demo's own
    for name in os.listdir(out_dir):
        path = out_dir / name
        if name in (DATA, RunDir.LOCK) or not DEMO_FILES.fullmatch(name):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def run(cfg: DemoConfig, as_json: bool = False) -> dict:
    # imported here, not at the top: the parser that registers the demo is built for every command
    from .lm.config import load_config
    from .lm.train import train

    settings = lm_settings(cfg, quiet=as_json)
    load_config(None, settings)  # every setting checked before anything is written
    out_dir = check_demo_dir(cfg.out)
    log = (lambda msg: None) if as_json else print  # with --json stdout holds the one JSON object only
    run_dir, sizes = RunDir(out_dir), (cfg.train_sentences, cfg.dev_sentences, cfg.test_sentences)
    with run_dir.lock("onlstm demo", log=log):  # three seeds: the training, development and test trees
        grammar, seeds = Grammar(), (cfg.seed, cfg.seed + 1_000_003, cfg.seed + 2_000_003)
        train_trees, dev, test = (grammar.corpus(n, seed=s) for n, s in zip(sizes, seeds))
        log(
            f"generated {len(train_trees)} training, {len(dev)} development and {len(test)} test sentences "
            f"({len({w for t in train_trees for w in t.leaves()})} word types) from the demo grammar"
        )
        _clear_earlier_demo(out_dir)
        _write_corpus(out_dir, {"train": train_trees, "valid": dev, "test": test})
    # lm train takes the directory's lock itself, so the demo's is released meanwhile
    trained = train(out_dir, out_dir / DATA, settings, log=log, keep=(DATA,))
    if trained.interrupted:
        log("Ctrl-C: training ended early; the demo goes on with the model so far")
    with run_dir.lock("onlstm demo", log=log):
        return _report(cfg, out_dir, trained, dev, test, as_json)


def _report(cfg: DemoConfig, out_dir: Path, trained: TrainResult, dev, test, as_json: bool) -> dict:
    """Parse with the run's weights, score, mark the run as the demo's and print the report."""
    with warnings.catch_warnings():  # its report says itself when no epoch ended: the note would say it twice
        warnings.simplefilter("ignore", WeightsNote)
        lm = load_language_model_run(out_dir)  # the best weights, or the last ones when no epoch ended
    model, vocab = lm.model, lm.vocab
    scores = _score(cfg, model, vocab, dev, test, out_dir)
    # the demo's part of the header: parse_layer (1-based), the layer chosen on the development sentences, which
    # parse and plot then use by default (how the model reads text, "text", lm train's code saved from the
    # grammar's vocabulary); demo lets export and a later demo recognise the run
    best = scores["best"]
    config = {**lm.config, "trained_on": "onlstm demo grammar"}
    RunDir(out_dir).write_config({**config, "parse_layer": best + 1, "demo": cfg.to_dict()})
    info = dict(steps=trained.steps, epochs_validated=len(trained.history), train_seconds=round(trained.seconds, 1))
    info.update(best_valid_ppl=None if trained.best is None else math.exp(-trained.best), weights=lm.weights.name)
    info["stopped_by"] = {"stopped": "time", "finished": "epochs"}.get(trained.status, trained.status)
    try:  # a plot of one test sentence
        from .parsing.plots import plot_sentence

        k = next(i for i, t in enumerate(test) if 7 <= len(t.leaves()) <= 12)
        plot = plot_sentence(model, vocab, test[k].leaves(), out_dir / "example", gold=unlabel(test[k]), layer=best)
        plots = [str(f) for f in plot]
    except ImportError as e:  # matplotlib missing: the numbers still stand
        plots = [f"(no plot: {e})"]
    result = dict(train=info, vocab_size=len(vocab), model=model.config.to_dict(), chosen_layer=best + 1)
    result.update(layers=scores["layers"], baselines=scores["baselines"], onlstm_beats_every_baseline=scores["beats"])
    speed = (len(dev) + len(test)) / scores["parse_seconds"]
    result.update(test_sentences=len(test), parse_sentences_per_second=speed, run_dir=str(out_dir), plots=plots)
    if as_json:
        print(json_text(result, indent=None))
    else:
        _print_report(info, scores, dev, test, out_dir)
    return result


def _score(cfg: DemoConfig, model: LanguageModel, vocab: Vocab, dev, test, out_dir: Path) -> dict:
    """Per-layer F1 on test, the layer chosen on dev, the baselines; writes the test trees (gold, predicted)."""
    t0 = time.monotonic()
    dev_words, test_words = [t.leaves() for t in dev], [t.leaves() for t in test]
    dev_f, test_f = (sentence_distances(model, vocab, words)[0] for words in (dev_words, test_words))
    layers = range(len(model.layers))
    per_layer_dev = [evaluate(dev, trees_from_distances(dev_words, dev_f, l)).sentence.f1 for l in layers]
    best = max(layers, key=lambda l: per_layer_dev[l])
    preds = [trees_from_distances(test_words, test_f, l) for l in layers]
    per_layer_test = []
    for l, ev in enumerate(evaluate(test, pred) for pred in preds):
        row = {"layer": l + 1, "sentence_f1": ev.sentence.f1, "corpus_f1": ev.corpus.f1, "evalb_f1": ev.evalb.f1}
        per_layer_test.append({**row, "dev_sentence_f1": per_layer_dev[l]})
    scores = dict(best=best, layers=per_layer_test, pred=preds[best], parse_seconds=time.monotonic() - t0)
    scores["baselines"] = baselines = score_baselines(test, draws=5, seed=cfg.seed)
    write_text(out_dir / "test_gold.txt", "\n".join(to_brackets(unlabel(t)) for t in test) + "\n")
    write_text(out_dir / "test_pred.txt", "\n".join(to_brackets(t) for t in preds[best]) + "\n")
    scores["beats"] = all(per_layer_test[best]["sentence_f1"] > b["sentence_f1"] for b in baselines.values())
    return scores


def _print_report(info: dict, scores: dict, dev, test, out_dir: Path) -> None:
    # a line of the table: the sentence, corpus and EVALB F1 in %
    f1_row = lambda label, sc: (
        f"{label:24}{100 * sc['sentence_f1']:9.1f}{100 * sc['corpus_f1']:8.1f}{100 * sc['evalb_f1']:8.1f}"
    )
    best, pred, weights = scores["best"], scores["pred"], info["weights"]
    if info["best_valid_ppl"] is not None and weights == RunDir.WEIGHTS.format(tag="best"):
        weights += f", validation perplexity {info['best_valid_ppl']:.2f}"
    elif weights == RunDir.WEIGHTS.format(tag="last"):
        weights += ": no epoch ended, the weights at the stop"
    steps, epochs, seconds = info["steps"], info["epochs_validated"], info["train_seconds"]
    print(f"\ntrained {steps} steps ({epochs} epochs validated) in {seconds:.0f}s; parsing with {weights}")
    print(
        f"\nunsupervised parsing of {len(test)} held-out sentences (F1 in %; layer chosen on {len(dev)} dev sentences)"
    )
    print(f"{'':24}{'sentence':>9}{'corpus':>8}{'EVALB':>8}")
    for row in scores["layers"]:
        mark = "  <- chosen on dev" if row["layer"] == best + 1 else ""
        print(f1_row(f"ON-LSTM layer {row['layer']}", row) + mark)
    for name, sc in scores["baselines"].items():
        print(f1_row(f"{name} baseline" + (" (5 draws)" if name == "random" else ""), sc))
    verdict = "beats" if scores["beats"] else "does NOT beat"
    print(f"\nON-LSTM (layer {best + 1}) {verdict} every trivial baseline on sentence F1.")
    print("\nexamples (gold | induced):")
    for k in range(4):
        print(f"  gold: {to_brackets(unlabel(test[k]))}\n  pred: {to_brackets(pred[k])}\n")
    parse = f"{onlstm_command()} parsing parse --checkpoint {shlex.quote(str(out_dir))}"
    print(f"checkpoint, trees and plots in {out_dir}/ (try: {parse} <<< 'the dog saw a cat')")


def onlstm_command() -> str:
    """How to run ``onlstm`` again from this shell: ``onlstm`` when that name finds the script running now,
    else that script's path (``.venv/bin/onlstm`` under ``make demo``, the venv not activated) or, when run as
    ``python -m onlstm``, this Python with ``-m onlstm``."""
    script, found = Path(sys.argv[0]), shutil.which("onlstm")
    if script.name == "onlstm":
        same = found is not None and Path(found).resolve() == script.resolve()
        return "onlstm" if same else shlex.quote(str(script))
    if found is not None and Path(found).absolute().parent == Path(sys.executable).absolute().parent:
        return "onlstm"  # this environment's script is on PATH
    return f"{shlex.quote(sys.executable)} -m onlstm"
