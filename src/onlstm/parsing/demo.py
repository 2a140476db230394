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
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..checkpoint import config_header, save_weights, write_json
from ..data.grammar import Grammar
from ..data.vocab import EOS, Vocab
from ..models.language_model import LanguageModel, LMConfig
from .baselines import score_baselines
from .metrics import evaluate
from .trees import to_brackets, unlabel
from .induce import sentence_distances, trees_from_distances


@dataclass
class DemoConfig:
    out: str = "demo_out"
    seconds: float = 150.0
    seed: int = 0
    train_sentences: int = 20000
    dev_sentences: int = 300
    test_sentences: int = 500
    emb_size: int = 64
    hidden_sizes: tuple = (128, 128, 64)
    chunk_size: int = 8
    batch_size: int = 32
    bptt: int = 35
    lr: float = 3e-3
    master_input: str = "reverse"   # see README: the demo runs measured with both gates
    dropout: float = 0.1        # locked dropouts (input, between layers, output) and DropConnect
    threads: int = 1       # small matrices: one thread is as fast as two and immune to other load


def _stream(sentences, vocab: Vocab) -> torch.Tensor:
    ids = []
    for s in sentences:
        ids += vocab.encode(s)[0] + [vocab.index[EOS]]
    return torch.tensor(ids)


def train_lm(cfg: DemoConfig, train_sents, vocab: Vocab, quiet: bool) -> tuple[LanguageModel, dict]:
    torch.manual_seed(cfg.seed)
    model_cfg = LMConfig(vocab_size=len(vocab), emb_size=cfg.emb_size, hidden_sizes=list(cfg.hidden_sizes),
                         cell="onlstm", chunk_size=cfg.chunk_size, master_input=cfg.master_input,
                         dropout_emb=0.0, dropout_in=cfg.dropout, dropout_hidden=cfg.dropout,
                         dropout_out=cfg.dropout, dropconnect=cfg.dropout)
    model = LanguageModel(model_cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    data = _stream(train_sents, vocab)
    n = data.numel() // cfg.batch_size
    data = data[:n * cfg.batch_size].view(cfg.batch_size, n).t().contiguous()   # (steps, B)
    start, steps, tokens, loss_avg, state, i = time.monotonic(), 0, 0, None, None, 0
    bar = tqdm(total=int(cfg.seconds), unit="s", desc="training ON-LSTM LM", disable=quiet,
               bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f}s {postfix}")
    model.train()
    while time.monotonic() - start < cfg.seconds:
        if i + cfg.bptt + 1 > data.shape[0]:
            i, state = 0, None
        x, y = data[i:i + cfg.bptt], data[i + 1:i + 1 + cfg.bptt]
        i += cfg.bptt
        state = None if state is None else [tuple(t.detach() for t in s) for s in state]
        out, state, _ = model(x, state)
        loss = F.cross_entropy(model.logits(out).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        steps += 1
        tokens += y.numel()
        loss_avg = loss.item() if loss_avg is None else 0.98 * loss_avg + 0.02 * loss.item()
        elapsed = time.monotonic() - start
        bar.n = min(int(cfg.seconds), int(elapsed))
        bar.set_postfix_str(f"loss {loss_avg:.3f} ppl {math.exp(loss_avg):.2f} {tokens / elapsed:.0f} tok/s", refresh=False)
        bar.refresh()
    bar.close()
    model.eval()
    return model, {"steps": steps, "tokens": tokens, "train_seconds": time.monotonic() - start,
                   "train_loss": loss_avg}


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}"


def run(cfg: DemoConfig, as_json: bool = False) -> dict:
    torch.set_flush_denormal(True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    quiet = as_json
    out_dir = Path(cfg.out)
    grammar = Grammar()
    train = grammar.corpus(cfg.train_sentences, seed=cfg.seed)
    dev = grammar.corpus(cfg.dev_sentences, seed=cfg.seed + 1_000_003)
    test = grammar.corpus(cfg.test_sentences, seed=cfg.seed + 2_000_003)
    train_words = [t.leaves() for t in train]
    vocab = Vocab.build(train_words)
    if not quiet:
        print(f"generated {len(train)} training, {len(dev)} development and {len(test)} test sentences "
              f"({len(vocab)} word types) from the demo grammar")
    model, info = train_lm(cfg, train_words, vocab, quiet)

    # checkpoint: an ordinary language-model run directory
    save_weights(out_dir / "model.best.safetensors", model)
    vocab.save(out_dir / "vocab.json")
    write_json(out_dir / "config.json", config_header("lm", model.config.to_dict(), text_normalisation="lower",
                                                      trained_on="onlstm demo grammar", demo=asdict(cfg)))

    t0 = time.monotonic()
    dev_words, test_words = [t.leaves() for t in dev], [t.leaves() for t in test]
    dev_f, _, _ = sentence_distances(model, vocab, dev_words)
    test_f, _, _ = sentence_distances(model, vocab, test_words)
    n_layers = len(model.layers)
    per_layer_dev = [evaluate(dev, trees_from_distances(dev_words, dev_f, l)).sentence.f1 for l in range(n_layers)]
    best = max(range(n_layers), key=lambda l: per_layer_dev[l])
    per_layer_test = []
    for l in range(n_layers):
        ev = evaluate(test, trees_from_distances(test_words, test_f, l))
        per_layer_test.append({"layer": l + 1, "sentence_f1": ev.sentence.f1, "corpus_f1": ev.corpus.f1,
                               "evalb_f1": ev.evalb.f1, "dev_sentence_f1": per_layer_dev[l]})
    pred = trees_from_distances(test_words, test_f, best)
    parse_seconds = time.monotonic() - t0
    baselines = score_baselines(test, draws=5, seed=cfg.seed)
    (out_dir / "test_gold.txt").write_text("\n".join(to_brackets(unlabel(t)) for t in test) + "\n")
    (out_dir / "test_pred.txt").write_text("\n".join(to_brackets(t) for t in pred) + "\n")
    chosen = per_layer_test[best]
    beats = all(chosen["sentence_f1"] > b["sentence_f1"] for b in baselines.values())

    plot_files = []
    try:
        from .plots import plot_sentence
        k = next(i for i, w in enumerate(test_words) if 7 <= len(w) <= 12)
        plot_files = plot_sentence(model, vocab, test_words[k], out_dir / "example", gold=unlabel(test[k]),
                                   layer=best)
    except ImportError as e:       # matplotlib missing: the numbers still stand
        plot_files = [f"(no plot: {e})"]

    result = {
        "train": info, "vocab_size": len(vocab), "model": model.config.to_dict(),
        "chosen_layer": best + 1, "layers": per_layer_test, "baselines": baselines,
        "onlstm_beats_every_baseline": beats, "test_sentences": len(test),
        "parse_sentences_per_second": (len(dev) + len(test)) / parse_seconds,
        "run_dir": str(out_dir), "plots": [str(p) for p in plot_files],
    }
    if as_json:
        print(json.dumps(result))
        return result
    print(f"\ntrained {info['steps']} steps ({info['tokens']} tokens) in {info['train_seconds']:.0f}s; "
          f"final training loss {info['train_loss']:.3f}")
    print(f"\nunsupervised parsing of {len(test)} held-out sentences (F1 in %; layer chosen on {len(dev)} dev sentences)")
    print(f"{'':24}{'sentence':>9}{'corpus':>8}{'EVALB':>8}")
    for row in per_layer_test:
        mark = "  <- chosen on dev" if row["layer"] == best + 1 else ""
        print(f"{'ON-LSTM layer ' + str(row['layer']):24}{_pct(row['sentence_f1']):>9}{_pct(row['corpus_f1']):>8}"
              f"{_pct(row['evalb_f1']):>8}{mark}")
    for name, sc in baselines.items():
        label = f"{name} baseline" + (" (5 draws)" if name == "random" else "")
        print(f"{label:24}{_pct(sc['sentence_f1']):>9}{_pct(sc['corpus_f1']):>8}{_pct(sc['evalb_f1']):>8}")
    print(f"\nON-LSTM (layer {best + 1}) {'beats' if beats else 'does NOT beat'} every trivial baseline on sentence F1.")
    print("\nexamples (gold | induced):")
    for k in range(4):
        print(f"  gold: {to_brackets(unlabel(test[k]))}\n  pred: {to_brackets(pred[k])}\n")
    print(f"checkpoint, trees and plots in {out_dir}/ (try: onlstm parse --checkpoint {out_dir} <<< 'the dog saw a cat')")
    return result
