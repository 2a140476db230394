"""``onlstm lm train`` and ``onlstm lm eval``."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from ..config import option, seed_option
from ..errors import EXIT_INTERRUPTED, command_error, counted
from ..files import json_text, read_input, split_lines
from ..flags import add_command, add_group, add_runtime_flags, runtime_settings
from .config import EvalRuntime, add_config_flags

WEIGHTS = ("best", "last")
# no default value: a choice given explicitly is refused with a --checkpoint that names another weights file
WEIGHTS_HELP = "which weights of a run directory (default: best, or last while the run has no best)"


@dataclass(kw_only=True)
class TrainArgs:
    """``lm train``'s own arguments (its settings: :func:`add_config_flags`)."""

    config: Path | None = option(None, "YAML file or preset name (ptb-cpu, ptb-paper, tiny; `onlstm presets`)")
    data_dir: Path = option(help="folder with ptb.{train,valid,test}.txt (or train.txt, ...)")
    out: Path = option(help="run directory (checkpoints, config, logs)")
    resume: bool = option(
        False,
        "continue the run in --out exactly where it stopped (its saved settings are used; only runtime fields "
        "such as --epochs, --max-steps, --device, --threads may change)",
    )


@dataclass(kw_only=True)
class EvalArgs:
    checkpoint: Path = option(help="run directory or a .safetensors file in one")
    data_dir: Path | None = option(None, "corpus folder (default: the one the run was trained on)")
    split: str = option("test", choices=("train", "valid", "test"))
    protocol: str = option("paper", choices=("paper", "batched", "both"))
    batch_size: int = option(10, "columns of the batched protocol", ge=1)
    bptt: int = option(70, "segment length", ge=1)
    weights: str | None = option(None, WEIGHTS_HELP, choices=WEIGHTS)
    oov: str | None = option(
        None, "words outside the vocabulary (default: the run's own)", choices=("auto", "error", "unk")
    )
    json: bool = option(False, "print one JSON object")


@dataclass(kw_only=True)
class SurprisalArgs:
    checkpoint: Path = option(help="run directory, a .safetensors file in one, or a model")
    file: Path = option(help="sentences, one per line, in plain English ('-': stdin)", positional=True)
    pretokenized: bool = option(
        False, "the lines are already in the model's convention (tokens split by spaces), read as they are"
    )
    out: Path | None = option(None, "the TSV to write (default: standard output); an existing file needs --overwrite")
    overwrite: bool = option(False, "replace an existing --out file")
    batch_size: int = option(2048, "sentences per prefix tree", ge=1)
    weights: str | None = option(None, WEIGHTS_HELP, choices=WEIGHTS)


@dataclass(kw_only=True)
class CompareArgs:
    """``lm compare``'s own arguments (the settings every run shares: :func:`add_config_flags`)."""

    config: Path | None = option(None, "YAML file or preset name (e.g. ptb-cpu) every run is trained with")
    data_dir: Path = option(help="folder with ptb.{train,valid,test}.txt")
    out: Path = option(help="folder of the study: one run folder per cell and seed, evals/, compare.json, tables.md")
    cells: list[str] = option(["onlstm", "lstm"], "recurrent layers to compare (the first against each other)")
    seeds: list[int] = seed_option([141, 142, 143], "seeds, the same for every cell")
    jobs: int = option(1, "runs trained at once, each a process of its own", ge=1)
    finished_only: bool = option(False, "train nothing: measure the finished runs, list the others")
    treebank: Path | None = option(None, "Penn Treebank .mrg folder for the trees' F1 (e.g. NLTK's WSJ sample)")
    syneval_data: Path | None = option(
        None, "Marvin & Linzen pairs (syneval --data; the whole suite: onlstm data marvin-linzen) to score every run on"
    )
    suites: Path | None = option(None, "a folder of SyntaxGym suites (syneval --suite) to score every run on")
    eval_threads: int = option(1, "CPU threads of each measuring command", ge=1)


def register(subparsers) -> None:
    """Add ``onlstm lm {train,eval}`` to the top-level ``subparsers``."""
    about = "AWD-style word-level language model with ON-LSTM (or LSTM/GRU) layers."
    sub = add_group(subparsers, "lm", "word-level language modelling (PTB): train, eval, surprisal, compare", about)
    add_config_flags(add_command(sub, "train", _cmd_train, TrainArgs))
    add_runtime_flags(add_command(sub, "eval", _cmd_eval, EvalArgs), EvalRuntime)
    add_runtime_flags(add_command(sub, "surprisal", _cmd_surprisal, SurprisalArgs), EvalRuntime)
    add_config_flags(add_command(sub, "compare", _cmd_compare, CompareArgs), grid=True)


def _cmd_train(args: argparse.Namespace) -> int:
    """train a language model (resumable; torchrun for several processes)

    Train the paper's language model. Settings: defaults (the paper's command) <- --config FILE <- flags.
    Ctrl-C stops after the current step and saves a resumable checkpoint. Several processes: torchrun
    --nproc_per_node N -m onlstm lm train ...
    """
    from tqdm import tqdm

    from .config import explicit_settings
    from .train import train

    try:
        explicit = explicit_settings(args.config, args)
        result = train(args.out, args.data_dir, explicit, resume=args.resume, log=tqdm.write)
    except ValueError as e:  # the settings' checks raise plain ValueErrors: bad input all the same
        raise command_error(e) from None
    return EXIT_INTERRUPTED if result.interrupted else 0


def _cmd_compare(args: argparse.Namespace) -> int:
    """train every cell with every seed under the same settings, then measure and tabulate them

    The language-model half of the paper as one command: OUT/<cell>-seed<seed> trained --jobs at a time (each a
    process of its own; a finished run is reused, an unfinished one resumed, Ctrl-C stops them with their resume
    files saved), then every finished run measured: PTB test perplexity, the trees' sentence F1 on --treebank,
    Marvin & Linzen on --syneval-data, SyntaxGym on --suites. Tables: each cell's mean ± std over its seeds and
    the first cell against each other (ahead/behind beyond two standard errors). Details: docs/lm.md.
    """
    from .compare import Yardsticks, compare
    from .config import explicit_settings

    try:
        explicit = explicit_settings(args.config, args, cells=args.cells)
        yardsticks = Yardsticks(args.treebank, args.syneval_data, args.suites, args.eval_threads)
        res = compare(explicit, args.data_dir, args.out, args.cells, args.seeds, yardsticks, args.jobs,
                      args.finished_only)  # fmt: skip
    except ValueError as e:
        raise command_error(e) from None
    print(res.tables)
    curves = " and curves.png" if (args.out / "curves.png").is_file() else ""
    print(f"wrote {args.out / 'compare.json'}, {args.out / 'tables.md'}{curves}")
    if res.failed:
        return max(e.code for e in res.failed)
    if res.interrupted:  # the runs caught the Ctrl-C and saved: said as any command says it
        print("onlstm lm compare: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


def run_threads(config: dict) -> int:
    """The thread count a run was trained with (``train.threads``, or the demo's ``demo.threads``; 0 when
    not set). Evaluation uses it by default: PyTorch's default of one thread per core is many times slower
    on a machine busy with other jobs, and the run's owner already chose what suits this model."""
    given = [(config.get(section) or {}).get("threads") for section in ("train", "demo")]
    return next((n for n in given if isinstance(n, int) and n > 0), 0)


def _cmd_surprisal(args: argparse.Namespace) -> int:
    """per-token surprisal (bits) of sentences, as lm-zoo's get-surprisals writes it

    One TSV row per token: sentence_id, token_id (both from 1), token, surprisal (-log2 p). Each line is plain
    English, read as the model's training text was written (for a PTB model: lower case, numbers as N,
    punctuation not read; --pretokenized: the line's tokens as they are), then as <eos> w1 ... wn <eos> from a
    zero state; its rows are the words the model read and the final <eos>. A word outside the vocabulary is
    written as <unk> (what the model read). Details: docs/lm.md, "Surprisal".
    """
    from ..data.vocab import EOS
    from ..device import resolve_device, setup_torch
    from ..files import check_new_files, check_output_file, write_text
    from ..models.language_model import load_language_model_run
    from ..saved import check_weights_choice
    from .evaluate import surprisal_table

    if args.out is not None:  # checked before the scoring: a folder or an unwritable place would fail only after it
        check_output_file(args.out, "--out")
        check_new_files([args.out], "--out", args.overwrite)
    check_weights_choice(args.checkpoint, args.weights)
    sentences = _read_lines(args.file)
    runtime = runtime_settings(args, EvalRuntime)
    device = resolve_device(runtime.device)
    run = load_language_model_run(args.checkpoint, args.weights or "best", device, reads_sentences=True)
    setup_torch(run_threads(run.config) if runtime.threads is None else runtime.threads)
    try:
        words = [s.split() for s in sentences] if args.pretokenized else run.model.words(sentences, allow_empty=True)
        bits = run.model.surprisals(words, args.batch_size, pretokenized=True)
    except ValueError as e:  # a vocabulary without <unk> meeting an unknown word, a malformed saved reader
        raise command_error(e) from None
    tokens = [[*w, EOS] for w in words]
    table, unknown = surprisal_table(tokens, bits, run.vocab)
    if args.out is None:
        sys.stdout.write(table)
    else:
        write_text(args.out, table)
    words = counted(sum(map(len, tokens)), "token")
    print(f"{counted(len(sentences), 'sentence')}, {words} ({unknown} read as <unk>)", file=sys.stderr)
    return 0


def _read_lines(path: Path) -> list[str]:
    return [line.strip() for line in split_lines(read_input(path))]


def _cmd_eval(args: argparse.Namespace) -> int:
    """perplexity of a trained model on a split

    Perplexity of a checkpoint. Protocols: 'paper' = the whole split as one stream (batch 1) in segments of
    --bptt from a zero state, the paper's test protocol; 'batched' = the split cut into --batch-size contiguous
    columns read together (each from a zero state, the last N mod B tokens dropped), the reference's validation
    protocol with B=10: faster, slightly higher perplexity.
    """
    from .. import graphs as shared_graphs
    from ..data.ptb import encode_split, split_file
    from ..device import resolve_device, setup_torch
    from ..models.language_model import load_language_model_run
    from ..saved import check_weights_choice
    from .evaluate import perplexity

    try:
        check_weights_choice(args.checkpoint, args.weights)
        runtime = runtime_settings(args, EvalRuntime)
        device = resolve_device(runtime.device)
        run = load_language_model_run(args.checkpoint, args.weights or "best", device, reads_sentences=True)
        setup_torch(run_threads(run.config) if runtime.threads is None else runtime.threads)
        data = run.config.get("data", {})
        if not (data_dir := args.data_dir or data.get("data_dir")):
            raise ValueError("pass --data-dir (the run does not record its corpus folder)")
        # the run's vocabulary and oov policy (a vocabulary that leaves words out maps them to <unk>, as training did)
        closed, limited = bool(data.get("closed_vocab", False)), bool(data.get("vocab_limited", False))
        path, oov = split_file(Path(data_dir), args.split), args.oov or data.get("oov", "auto")
        split = encode_split(args.split, path, run.vocab, closed, oov, limited=limited)
        protocols = ("paper", "batched") if args.protocol == "both" else (args.protocol,)
        bar = runtime.progress and not args.json
        graphs = runtime.cuda_graphs and device.type in shared_graphs.GRAPH_DEVICES
        opts = {"progress": bar, "recorder": shared_graphs.recorder_for(device) if graphs else None}
        results = {
            p: perplexity(run.model, split.ids, p, args.batch_size, args.bptt, device, **opts) for p in protocols
        }
    except ValueError as e:
        raise command_error(e) from None
    if args.json:
        facts = dict(weights=str(run.weights), split=args.split, file=str(split.path), unknown_words=split.n_unknown)
        print(json_text({**facts, **{k: v.to_dict() for k, v in results.items()}}))
        return 0
    unknown = f", {split.n_unknown} mapped to <unk>" if split.n_unknown else ""
    print(f"{run.weights} on {split.path} ({split.n_tokens:,} tokens{unknown})")
    for r in results.values():
        print(f"{args.split} {r.describe()}")
    return 0
