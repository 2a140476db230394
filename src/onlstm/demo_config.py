"""The settings of ``onlstm demo`` and the command that reproduces a demo run, apart from the demo itself
(which needs nltk): ``onlstm export`` writes a demo run's command with the core install alone."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from .config import Config, option, seed_option, threads_option
from .flags import command_flags


@dataclass
class DemoConfig(Config):
    """Settings of ``onlstm demo`` (saved under ``demo`` in the run's header)."""

    section = "demo"

    out: str = option("demo_out", "run directory for the checkpoint, corpus, trees and plots")
    seconds: float = option(
        150.0, "training time budget in SECONDS (lm train's --time-limit counts minutes: --seconds 150 = 2.5 min)", gt=0
    )
    seed: int = seed_option(0, "seed of the generated corpus, the weights and the random baseline")
    train_sentences: int = option(20000, "generated training sentences", ge=1)
    dev_sentences: int = option(300, "generated development sentences (validation; choose the layer)", ge=1)
    test_sentences: int = option(500, "generated held-out test sentences", ge=1)
    emb_size: int = option(64, "embedding width (= last layer's width)", ge=1)
    hidden_sizes: list[int] = option([128, 128, 64], "width of every ON-LSTM layer", ge=1)
    chunk_size: int = option(8, "ON-LSTM chunk size", ge=1)
    batch_size: int = option(32, "columns of the training stream", ge=1)
    bptt: int = option(35, "segment length", ge=1)
    lr: float = option(3e-3, "Adam learning rate", gt=0)
    # README: the demo runs were measured with both master input gates.
    master_input: str = option("reverse", "ON-LSTM master input gate: paper or reverse", choices=("paper", "reverse"))
    dropout: float = option(0.1, "locked dropouts (input, between layers, output) and DropConnect", ge=0, lt=1)
    # Small matrices: one thread is as fast as two and immune to other load.
    threads: int = threads_option(1, "torch threads (the model is small)")


def demo_command(config: dict) -> str:
    """The ``onlstm demo`` command that reproduces a demo run's settings (its header's ``demo`` section)."""
    return shlex.join(["onlstm", "demo", *command_flags(DemoConfig, config["demo"])])
