"""``onlstm demo``: the main job end to end on data the project makes itself.

1. Generate a corpus with known trees from the probabilistic grammar of :mod:`onlstm.data.grammar`.
2. Train a small ON-LSTM language model on its sentences (CPU, a fixed time budget, progress bar).
3. Induce trees on held-out sentences from each layer's master-forget distances; pick the layer on a
   development split, report it on a separate test split.
4. Print sentence and corpus F1 against the four trivial baselines on the same test sentences, a few
   trees side by side with gold, and save a plot. The run directory is a normal checkpoint, so
   ``onlstm parse --checkpoint DIR`` works on it.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..checkpoint import CheckpointError, config_header, read_json, save_weights, write_json, write_text
from ..config import (
    Config,
    ConfigError,
    check_probabilities,
    command_flags,
    option,
    seed_option,
    threads_option,
)
from ..data.grammar import Grammar
from ..data.vocab import EOS, Vocab
from ..models.language_model import LanguageModel, LMConfig
from ..runs import (
    RunDirError,
    RunLock,
    StopRequest,
    check_output_folder,
    describe_run,
    progress_bar,
    setup_torch,
)
from .baselines import score_baselines
from .induce import sentence_distances, trees_from_distances
from .metrics import evaluate
from .trees import to_brackets, unlabel


@dataclass
class DemoConfig(Config):
    """Settings of ``onlstm demo`` (saved under ``demo`` in the run's ``config.json``)."""

    section = "demo"

    out: str = option("demo_out", "run directory for the checkpoint, trees and plots")
    seconds: float = option(150.0, "training time budget in seconds")
    seed: int = seed_option(0, "seed of the generated corpus, the weights and the random baseline")
    train_sentences: int = option(20000, "generated training sentences")
    dev_sentences: int = option(300, "generated development sentences (choose the layer)")
    test_sentences: int = option(500, "generated held-out test sentences")
    emb_size: int = option(64, "embedding width (= last layer's width)")
    hidden_sizes: list[int] = option([128, 128, 64], "width of every ON-LSTM layer")
    chunk_size: int = option(8, "ON-LSTM chunk size")
    batch_size: int = option(32, "columns of the training stream")
    bptt: int = option(35, "segment length")
    lr: float = option(3e-3, "Adam learning rate")
    # README: the demo runs were measured with both master input gates.
    master_input: str = option("reverse", "ON-LSTM master input gate: paper or reverse", choices=("paper", "reverse"))
    dropout: float = option(0.1, "locked dropouts (input, between layers, output) and DropConnect")
    # Small matrices: one thread is as fast as two and immune to other load.
    threads: int = threads_option(1, "torch threads (the model is small)")

    def validate(self) -> None:
        for name in ("seconds", "train_sentences", "dev_sentences", "test_sentences", "batch_size", "bptt", "lr"):
            if not getattr(self, name) > 0 or not math.isfinite(getattr(self, name)):  # NaN fails both
                raise ConfigError(f"demo.{name} must be positive and finite, got {getattr(self, name)}")
        check_probabilities(self, ["dropout"])


def _stream(sentences, vocab: Vocab) -> torch.Tensor:
    ids = []
    for s in sentences:
        ids += vocab.encode(s)[0] + [vocab.index[EOS]]
    return torch.tensor(ids)


def _demo_model(cfg: DemoConfig, vocab: Vocab) -> LanguageModel:
    torch.manual_seed(cfg.seed)
    model_cfg = LMConfig(
        vocab_size=len(vocab),
        emb_size=cfg.emb_size,
        hidden_sizes=list(cfg.hidden_sizes),
        cell="onlstm",
        chunk_size=cfg.chunk_size,
        master_input=cfg.master_input,
        dropout_emb=0.0,
        dropout_in=cfg.dropout,
        dropout_hidden=cfg.dropout,
        dropout_out=cfg.dropout,
        dropconnect=cfg.dropout,
    )
    return LanguageModel(model_cfg)


def train_lm(cfg: DemoConfig, train_sents, vocab: Vocab, quiet: bool) -> tuple[LanguageModel, dict]:
    """Adam on contiguous columns of the training stream for ``cfg.seconds`` seconds. Ctrl-C (the shared
    :class:`~onlstm.runs.StopRequest`) ends training early and the demo goes on with the model so far."""
    model = _demo_model(cfg, vocab)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    data = _stream(train_sents, vocab)
    n = data.numel() // cfg.batch_size
    data = data[: n * cfg.batch_size].view(cfg.batch_size, n).t().contiguous()  # (steps, B)
    start, steps, tokens, loss_avg, state, i = time.monotonic(), 0, 0, None, None, 0
    bar = progress_bar(
        not quiet,
        total=int(cfg.seconds),
        unit="s",
        desc="training ON-LSTM LM",
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f}s {postfix}",
    )
    model.train()
    with StopRequest() as stop:
        while time.monotonic() - start < cfg.seconds and not stop.requested:
            if i + cfg.bptt + 1 > data.shape[0]:
                i, state = 0, None
            x, y = data[i : i + cfg.bptt], data[i + 1 : i + 1 + cfg.bptt]
            i += cfg.bptt
            loss, state = _demo_step(model, opt, x, y, state)
            steps += 1
            tokens += y.numel()
            loss_avg = loss if loss_avg is None else 0.98 * loss_avg + 0.02 * loss
            elapsed = time.monotonic() - start
            bar.n = min(int(cfg.seconds), int(elapsed))
            bar.set_postfix_str(
                f"loss {loss_avg:.3f} ppl {math.exp(loss_avg):.2f} {tokens / elapsed:.0f} tok/s", refresh=False
            )
            bar.refresh()
    bar.close()
    model.eval()
    return model, {
        "steps": steps,
        "tokens": tokens,
        "train_seconds": time.monotonic() - start,
        "train_loss": loss_avg,
        "stopped_by": "interrupted" if stop.requested else "time",
    }


def _demo_step(model: LanguageModel, opt: torch.optim.Optimizer, x, y, state) -> tuple[float, list]:
    """One update on segment ``x -> y`` from the carried (detached) ``state``; ``(loss, new state)``."""
    state = None if state is None else [tuple(t.detach() for t in s) for s in state]
    out, state, _ = model(x, state)
    loss = F.cross_entropy(model.logits(out).flatten(0, 1), y.flatten())
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    return loss.item(), state


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}"


def check_demo_dir(out: str | Path) -> Path:
    """``--out`` of the demo: a writable directory holding no run but, at most, an earlier demo's (which the
    demo replaces: it is made again in minutes); checked before any work."""
    out_dir = check_output_folder(out)
    held = describe_run(out_dir)
    if held:
        try:
            earlier_demo = "demo" in read_json(out_dir / "config.json")
        except CheckpointError:
            earlier_demo = False
        if not earlier_demo or (out_dir / "resume.safetensors").exists():
            raise RunDirError(
                f"{out_dir} already holds a run that the demo did not make (found: {held}); the demo would "
                "overwrite it: choose another --out"
            )
    return out_dir


def run(cfg: DemoConfig, as_json: bool = False) -> dict:
    out_dir = check_demo_dir(cfg.out)
    setup_torch(cfg.threads)
    with RunLock(out_dir, "onlstm demo", log=None if as_json else print):
        return _run_locked(cfg, out_dir, as_json)


def _run_locked(cfg: DemoConfig, out_dir: Path, as_json: bool) -> dict:
    train, dev, test, vocab = _corpora(cfg, quiet=as_json)
    model, info = train_lm(cfg, [t.leaves() for t in train], vocab, as_json)
    scores = _score(cfg, model, vocab, dev, test, out_dir)
    _save_run(cfg, out_dir, model, vocab, scores["best"] + 1)
    result = {
        "train": info,
        "vocab_size": len(vocab),
        "model": model.config.to_dict(),
        "chosen_layer": scores["best"] + 1,
        "layers": scores["layers"],
        "baselines": scores["baselines"],
        "onlstm_beats_every_baseline": scores["beats"],
        "test_sentences": len(test),
        "parse_sentences_per_second": (len(dev) + len(test)) / scores["parse_seconds"],
        "run_dir": str(out_dir),
        "plots": [str(p) for p in _plot_example(model, vocab, test, scores["best"], out_dir)],
    }
    if as_json:
        print(json.dumps(result))
    else:
        _print_report(info, scores, dev, test, out_dir)
    return result


def _corpora(cfg: DemoConfig, quiet: bool):
    """Training, development and test sentences from the demo grammar (three seeds), and the vocabulary."""
    grammar = Grammar()
    train = grammar.corpus(cfg.train_sentences, seed=cfg.seed)
    dev = grammar.corpus(cfg.dev_sentences, seed=cfg.seed + 1_000_003)
    test = grammar.corpus(cfg.test_sentences, seed=cfg.seed + 2_000_003)
    vocab = Vocab.build([t.leaves() for t in train])
    if not quiet:
        print(
            f"generated {len(train)} training, {len(dev)} development and {len(test)} test sentences "
            f"({len(vocab)} word types) from the demo grammar"
        )
    return train, dev, test, vocab


def demo_command(config: dict) -> str | None:
    """The ``onlstm demo`` command that reproduces a demo run's settings (its ``config.json``), else None."""
    import shlex

    if not isinstance(config.get("demo"), dict):
        return None
    return shlex.join(["onlstm", "demo", *command_flags(DemoConfig, config["demo"])])


def _save_run(cfg: DemoConfig, out_dir: Path, model: LanguageModel, vocab: Vocab, layer: int) -> None:
    """An ordinary language-model run directory, so ``onlstm parsing parse --checkpoint`` reads it;
    ``parse_layer`` (1-based) is the layer chosen on the development sentences, which ``parse`` and ``plot``
    then use by default."""
    save_weights(out_dir / "model.best.safetensors", model)
    vocab.save(out_dir / "vocab.json")
    write_json(
        out_dir / "config.json",
        config_header(
            "lm",
            model.config.to_dict(),
            text_normalisation="lower",
            trained_on="onlstm demo grammar",
            parse_layer=layer,
            demo=cfg.to_dict(),
        ),
    )


def _score(cfg: DemoConfig, model: LanguageModel, vocab: Vocab, dev, test, out_dir: Path) -> dict:
    """Per-layer F1 on test, the layer chosen on dev, the baselines; writes the test trees (gold, predicted)."""
    t0 = time.monotonic()
    dev_words, test_words = [t.leaves() for t in dev], [t.leaves() for t in test]
    out_dir.mkdir(parents=True, exist_ok=True)
    dev_f, _, _ = sentence_distances(model, vocab, dev_words)
    test_f, _, _ = sentence_distances(model, vocab, test_words)
    n_layers = len(model.layers)
    per_layer_dev = [evaluate(dev, trees_from_distances(dev_words, dev_f, l)).sentence.f1 for l in range(n_layers)]
    best = max(range(n_layers), key=lambda l: per_layer_dev[l])
    per_layer_test = []
    for l in range(n_layers):
        ev = evaluate(test, trees_from_distances(test_words, test_f, l))
        per_layer_test.append(
            {
                "layer": l + 1,
                "sentence_f1": ev.sentence.f1,
                "corpus_f1": ev.corpus.f1,
                "evalb_f1": ev.evalb.f1,
                "dev_sentence_f1": per_layer_dev[l],
            }
        )
    pred = trees_from_distances(test_words, test_f, best)
    parse_seconds = time.monotonic() - t0
    baselines = score_baselines(test, draws=5, seed=cfg.seed)
    write_text(out_dir / "test_gold.txt", "\n".join(to_brackets(unlabel(t)) for t in test) + "\n")
    write_text(out_dir / "test_pred.txt", "\n".join(to_brackets(t) for t in pred) + "\n")
    beats = all(per_layer_test[best]["sentence_f1"] > b["sentence_f1"] for b in baselines.values())
    return {
        "best": best,
        "layers": per_layer_test,
        "pred": pred,
        "baselines": baselines,
        "beats": beats,
        "parse_seconds": parse_seconds,
    }


def _plot_example(model: LanguageModel, vocab: Vocab, test, best: int, out_dir: Path) -> list:
    try:
        from .plots import plot_sentence

        test_words = [t.leaves() for t in test]
        k = next(i for i, w in enumerate(test_words) if 7 <= len(w) <= 12)
        return plot_sentence(model, vocab, test_words[k], out_dir / "example", gold=unlabel(test[k]), layer=best)
    except ImportError as e:  # matplotlib missing: the numbers still stand
        return [f"(no plot: {e})"]


def _print_report(info: dict, scores: dict, dev, test, out_dir: Path) -> None:
    best, pred = scores["best"], scores["pred"]
    print(
        f"\ntrained {info['steps']} steps ({info['tokens']} tokens) in {info['train_seconds']:.0f}s; "
        f"final training loss {info['train_loss']:.3f}"
    )
    print(
        f"\nunsupervised parsing of {len(test)} held-out sentences (F1 in %; layer chosen on {len(dev)} dev sentences)"
    )
    print(f"{'':24}{'sentence':>9}{'corpus':>8}{'EVALB':>8}")
    for row in scores["layers"]:
        mark = "  <- chosen on dev" if row["layer"] == best + 1 else ""
        print(
            f"{'ON-LSTM layer ' + str(row['layer']):24}{_pct(row['sentence_f1']):>9}{_pct(row['corpus_f1']):>8}"
            f"{_pct(row['evalb_f1']):>8}{mark}"
        )
    for name, sc in scores["baselines"].items():
        label = f"{name} baseline" + (" (5 draws)" if name == "random" else "")
        print(f"{label:24}{_pct(sc['sentence_f1']):>9}{_pct(sc['corpus_f1']):>8}{_pct(sc['evalb_f1']):>8}")
    print(
        f"\nON-LSTM (layer {best + 1}) {'beats' if scores['beats'] else 'does NOT beat'} every trivial baseline on "
        "sentence F1."
    )
    print("\nexamples (gold | induced):")
    for k in range(4):
        print(f"  gold: {to_brackets(unlabel(test[k]))}\n  pred: {to_brackets(pred[k])}\n")
    print(
        f"checkpoint, trees and plots in {out_dir}/ (try: onlstm parse --checkpoint {out_dir} <<< 'the dog saw a cat')"
    )
