"""A third trainer in one file: a tiny ON-LSTM learns to copy symbols a few steps late. The engine (docs/design.md
§4.6) does the run directory, settings, budget, reports, weights, history.json, Ctrl-C and an exact ``--resume``:
``python examples/copy_task.py --out DIR [--epochs N] [--max-steps N] [--resume]`` (``--help``: every setting)."""

from __future__ import annotations

import shlex
import sys
from dataclasses import MISSING, asdict, dataclass, make_dataclass
from pathlib import Path

import torch
from torch import nn

from onlstm import ONLSTM
from onlstm.checkpoint import config_header, load_weights
from onlstm.config import ConfigError, count_option, flags_given, option, runtime_fields, seed_option
from onlstm.errors import EXIT_INTERRUPTED, OnlstmError
from onlstm.files import write_json
from onlstm.flags import OneLineParser, add_flags
from onlstm.runs import RunDir, RunKind, register_kind
from onlstm.runs.engine import BudgetOptions, Check, Plan, Progress, Saved, TrainResult, train_run, update

KIND = "copy-example"


@dataclass
class CopySettings(BudgetOptions):  # the task's settings; its budget, reports, device and threads: BudgetOptions'
    symbols: int = option(6, "distinct symbols (0 is the blank the output starts with)", ge=2)
    length: int = option(10, "symbols per sequence", ge=1)
    delay: int = option(2, "the output at step t is the input at step t - delay", ge=0)
    chunks: int = option(4, "ON-LSTM chunks (its units: chunks * chunk_size)", ge=1)
    chunk_size: int = option(8, "ON-LSTM units per chunk", ge=1)
    batch_size: int = option(16, "sequences per update", ge=1)
    batches: int = option(20, "updates per epoch (every epoch draws new sequences)", ge=1)
    lr: float = option(3e-3, "Adam learning rate", gt=0)
    seed: int = seed_option(0, "seed of the weights and the sequences")


@dataclass
class CopyRow:  # a validation check's row in history.json
    step: int = count_option(MISSING)
    train_loss: float = option(MISSING)
    valid_loss: float = option(MISSING)
    valid_accuracy: float = option(MISSING, ge=0, le=1)
    best: bool = False


CopyState = make_dataclass("CopyState", [])  # the task's part of the resume file: none (the data follows the seed)


class CopyModel(nn.Module):
    def __init__(self, cfg: CopySettings):
        super().__init__()
        hidden = cfg.chunks * cfg.chunk_size
        self.embed = nn.Embedding(cfg.symbols + 1, hidden)
        self.rnn = ONLSTM(hidden, hidden, chunk_size=cfg.chunk_size, batch_first=True)
        self.out = nn.Linear(hidden, cfg.symbols + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.embed(x))[0])

    @classmethod
    def from_pretrained(cls, path) -> CopyModel:  # the run kind's model: TrainResult.model() opens a run with it
        run, weights = RunDir.find(path)
        load_weights(weights, model := cls(CopySettings.from_dict(run.read_config(KIND)["train"])))
        return model.eval()


class CopyTask:
    """The copy task's part of a run (``onlstm.runs.engine.Task``): one pass an epoch, a check after each."""

    row, unit, perplexity, desc, steps_per_epoch, valid_every = CopyRow, "symbols", False, "copy", 0, 0
    end_pass = staticmethod(lambda prog, complete: complete or None)  # a pass is an epoch

    def __init__(self, cfg: CopySettings, device: torch.device, out: Path):
        self.cfg, self.device, self.state = cfg, device, CopyState()
        if cfg.delay >= cfg.length:  # a target is the input `delay` steps back, the blank before: all blank then
            raise ConfigError(f"--delay {cfg.delay} leaves every target blank: give one below --length {cfg.length}")
        self.resume_command = f"python examples/copy_task.py --resume --out {shlex.quote(str(out))}"  # the stop's
        torch.manual_seed(cfg.seed)
        self.model = CopyModel(cfg).to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.valid = self.sequences(-1, 4 * cfg.batch_size)  # never a training pass's (those are 0, 1, ...)
        self.header = config_header(KIND, {}, train=cfg.to_dict())
        self.vocab = lambda path: write_json(path, list(range(cfg.symbols + 1)))
        self.score_words = lambda score: f"valid accuracy {100 * score:.1f}%"
        self.resume = lambda prog, read=None: Saved(self.model, self.opt, device)  # what the engine saves, restores

    def sequences(self, salt: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:  # inputs and targets, by salt
        cfg, g = self.cfg, torch.Generator().manual_seed((self.cfg.seed * 1_000_003 + salt) % 2**64)  # its range
        x = torch.randint(1, cfg.symbols + 1, (n, cfg.length), generator=g)
        return x, torch.where(torch.arange(cfg.length) < cfg.delay, 0, x.roll(cfg.delay, 1))  # 0: a blank

    def sums(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # loss sum, right
        logits, y = self.model(x.to(self.device)), y.to(self.device)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum")
        return loss, (logits.argmax(-1) == y).sum()

    def pass_batches(self, prog: Progress) -> list:
        x, y = self.sequences(prog.epoch, self.cfg.batches * self.cfg.batch_size)
        return list(zip(x.split(self.cfg.batch_size), y.split(self.cfg.batch_size)))

    def train_step(self, batch, prog: Progress) -> dict:
        loss, right = self.sums(*batch)
        update(self.opt, loss / batch[1].numel(), self.model.parameters(), clip=1.0)
        return {"loss": loss.detach(), "accuracy": right, "n": batch[1].numel()}

    def validation(self, prog: Progress) -> Check:
        with torch.no_grad():
            loss, right = self.sums(*self.valid)
        n, seen = self.valid[1].numel(), max(prog.sums.get("n", 0.0), 1.0)
        record = dict(step=prog.step, train_loss=prog.sums.get("loss", 0.0) / seen)
        return Check(float(right) / n, {**record, "valid_loss": float(loss) / n, "valid_accuracy": float(right) / n})

    def after_check(self, prog: Progress, check: Check, improved: bool) -> str:
        return f"step {prog.step}: {self.score_words(check.score)}" + (" (best)" if improved else "")

    finish = staticmethod(lambda why, prog: ({"best_valid_accuracy": prog.best}, None))


def train(out: str | Path, given: dict | None = None, resume: bool = False, log=print) -> TrainResult:
    """Train the copy task into run directory ``out`` (or go on with it); ``given``: the CopySettings fields set."""
    parse = lambda sections: {"train": asdict(CopySettings.from_dict(sections.get("train") or {}))}
    build = lambda sections: {"train": CopySettings(**sections["train"])}
    plan = Plan(KIND, "python examples/copy_task.py", Path(out), {"train": given or {}}, parse, build,
                runtime_fields(CopySettings), resume, log=log)  # fmt: skip
    return train_run(plan, lambda run, settings, ctx: CopyTask(settings["train"], ctx.device, run.path))


register_kind(RunKind(KIND, "copy-task example", CopyModel, lambda header: None))


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the run directory")
    parser.add_argument("--resume", action="store_true", help="go on with the run in --out (a larger budget)")
    add_flags(parser, CopySettings, "train")
    args = parser.parse_args(argv)
    try:
        result = train(args.out, flags_given(args, "train"), args.resume)
    except OnlstmError as exc:
        print(f"copy_task: {exc}", file=sys.stderr)
        return exc.exit_code
    return EXIT_INTERRUPTED if result.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
