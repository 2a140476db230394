"""`lm train`'s step as CUDA graphs (onlstm/lm/graphs.py, issue #49). On the CPU, onlstm.graphs.EagerRecorder stands in
for CUDA's recorder, so everything but the capture is tested here: the buffers the graphs read and write, the
first step of each length, the state across epochs, the fallback when recording fails. The `cuda` tests check
the capture itself: a run with graphs trains what the eager run trains."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from onlstm import graphs as shared_graphs
from onlstm.lm.config import explicit_settings
from onlstm.lm.train import train
from support import TINY_LM, quiet, state_tensors, write_corpus

TRANSFORMER = {"cell": "transformer", "encoder_options": {"heads": 2, "block_dropout": 0.1}}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def settings(model: dict | None = None, **train_fields) -> dict:
    return explicit_settings(TINY_LM, {"train": {"epochs": 2, **train_fields}, "model": model or {}})


def weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "model.last.safetensors"))


def trained(tmp_path: Path, corpus: Path, name: str, seen: dict, log=quiet, **fields) -> dict[str, torch.Tensor]:
    """The weights after two epochs; ``seen``: the graphs' bookkeeping at the end (None when eager)."""

    def record(trainer) -> None:
        g = trainer.graphs
        seen.update(graphs=g, lengths=g and g.lengths, replayed=g and g.replayed, off=g and g.off)

    train(tmp_path / name, corpus, settings(**fields), on_step=record, log=log)
    return weights(tmp_path / name)


@pytest.mark.parametrize("model", [{}, {"cell": "lstm"}, TRANSFORMER], ids=["onlstm", "lstm", "transformer"])
def test_the_graphs_bookkeeping_trains_what_the_eager_step_trains(tmp_path, corpus, monkeypatch, model):
    monkeypatch.setattr(shared_graphs, "GRAPH_DEVICES", ("cuda", "cpu"))  # EagerRecorder replays by running the body
    eager, with_graphs = {}, {}
    want = trained(tmp_path, corpus, "eager", eager, model=model, cuda_graphs=False)
    got = trained(tmp_path, corpus, "graphs", with_graphs, model=model)
    assert eager["graphs"] is None and with_graphs["off"] is None
    # several lengths, each replayed after its first step: the test covers new lengths, replays and epoch starts
    assert len(with_graphs["lengths"]) >= 3 and with_graphs["replayed"] >= 10
    assert want.keys() == got.keys()
    # the same operations in the same order on one machine (autograd.grad instead of backward): equal to
    # rounding; a state not carried, a gradient not clipped or the masks drawn otherwise differ by far more
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-6, atol=1e-7, msg=k)


def test_a_failed_recording_is_said_once_and_the_run_trains_eagerly(tmp_path, corpus, monkeypatch):
    monkeypatch.setattr(shared_graphs, "GRAPH_DEVICES", ("cuda", "cpu"))

    def refuse(self, body):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr(shared_graphs.EagerRecorder, "record", refuse)
    lines, seen = [], {}
    got = trained(tmp_path, corpus, "refused", seen, log=lines.append)
    want = trained(tmp_path, corpus, "eager", {}, cuda_graphs=False)
    said = [line for line in lines if "CUDA graphs off" in line]
    assert len(said) == 1 and "operation not permitted when stream is capturing)" in said[0]
    assert seen["off"] and seen["lengths"] == []
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-6, atol=1e-7, msg=k)


def test_graphs_are_off_on_the_cpu_and_when_asked(tmp_path, corpus):
    seen = {}
    trained(tmp_path, corpus, "cpu", seen)  # the default: on, but only on CUDA
    assert seen["graphs"] is None


def test_the_flag_turns_them_off(corpus):
    from onlstm.cli import build_parser

    args = build_parser().parse_args(["lm", "train", "--data-dir", str(corpus), "--out", "x", "--no-cuda-graphs"])
    assert vars(args)["train.cuda_graphs"] is False


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_eager_step_leaves_no_autograd_graph_in_the_carried_state(tmp_path, corpus, precision):
    """The state an eager step carries to the next is cut from the step's graph at once. Kept until the next eager
    step, that graph kept every parameter's gradient accumulator alive into the next step's CUDA-graph capture,
    which then failed on an H200 in fp32."""
    kept = []

    def record(trainer) -> None:
        kept.extend(t for t in state_tensors(trainer.hidden) if t.requires_grad or t.grad_fn is not None)

    train(tmp_path / "run", corpus, settings(precision=precision, cuda_graphs=False), on_step=record, log=quiet)
    assert kept == []


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_graphs_train_what_the_eager_run_trains(tmp_path, corpus, precision):
    eager, with_graphs = {}, {}
    want = trained(tmp_path, corpus, "eager", eager, device="cuda", precision=precision, cuda_graphs=False)
    got = trained(tmp_path, corpus, "graphs", with_graphs, device="cuda", precision=precision)
    assert with_graphs["off"] is None and with_graphs["replayed"] >= 10  # captured, replayed
    # the replays draw the eager run's dropout masks (CUDA graphs advance the generator as eager steps do):
    # other masks would differ by far more than this; the products may round differently under capture
    tol = {"rtol": 1e-4, "atol": 1e-5} if precision == "fp32" else {"rtol": 2e-2, "atol": 2e-3}
    for k in want:
        torch.testing.assert_close(got[k], want[k], msg=k, **tol)


class CountingRecorder(shared_graphs.EagerRecorder):
    """The eager stand-in, counting the replays of what it recorded."""

    def __init__(self):
        self.replays = 0

    def record(self, body):
        def replay() -> None:
            self.replays += 1
            body()

        return replay


@pytest.mark.parametrize("model", [{}, TRANSFORMER], ids=["onlstm", "transformer"])
@pytest.mark.parametrize("protocol", ["paper", "batched"])
def test_evaluation_replaying_its_segment_scores_what_the_eager_loop_scores(model, protocol):
    from onlstm.lm.evaluate import perplexity
    from onlstm.models.language_model import LanguageModel, LMConfig

    torch.manual_seed(0)
    lm = LanguageModel(LMConfig(vocab_size=13, emb_size=8, hidden_sizes=[12, 8], chunk_size=4, **model))
    with torch.no_grad():  # weights large enough for the carried state to matter (at their initial scale a
        for p in lm.parameters():  # state not carried moved the loss by 2e-7 only; at this one by 1e-4 and more)
            p.mul_(8)
    ids = torch.randint(0, 13, (203,))
    recorder = CountingRecorder()
    want = perplexity(lm, ids, protocol, batch_size=3, bptt=8)
    got = perplexity(lm, ids, protocol, batch_size=3, bptt=8, recorder=recorder)
    assert recorder.replays >= 3  # the full segments after the first two (the zero state, the warm-up)
    assert got.tokens == want.tokens
    assert got.loss == pytest.approx(want.loss, rel=1e-6)


def test_lm_eval_replays_its_segments_and_scores_what_it_scores_eagerly(tmp_path, corpus, monkeypatch, capsys):
    import json

    from onlstm.cli import main

    trained(tmp_path, corpus, "run", {}, cuda_graphs=False)
    monkeypatch.setattr(shared_graphs, "GRAPH_DEVICES", ("cuda", "cpu"))
    recorder = CountingRecorder()
    monkeypatch.setattr(shared_graphs, "recorder_for", lambda device: recorder)
    argv = ["lm", "eval", "--checkpoint", str(tmp_path / "run"), "--protocol", "both", "--bptt", "4", "--json"]
    scores, replays = [], []
    for flags in ([], ["--no-cuda-graphs"]):
        assert main([*argv, *flags]) == 0
        report = json.loads(capsys.readouterr().out)
        scores.append([report[p]["loss"] for p in ("paper", "batched")])
        replays.append(recorder.replays)
    assert replays[0] >= 3 and replays[1] == replays[0]  # replayed with graphs; none with --no-cuda-graphs
    assert scores[0] == pytest.approx(scores[1], rel=1e-6)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_failed_capture_leaves_the_random_draws_working():
    """A capture that fails leaves torch's CUDA generator marked as capturing, and every later random draw failed
    ("Offset increment outside graph capture encountered unexpectedly": on an H200, a failed recording in one
    training run made every later run in that process fail). The recorder puts the generator's state back."""
    recorder = shared_graphs.CudaRecorder(torch.device("cuda"))
    x = torch.ones(4, device="cuda")

    def unsafe():  # a host read while capturing: the capture fails
        torch.rand(4, device="cuda")
        x.sum().item()

    with pytest.raises(RuntimeError):  # torch.AcceleratorError, a RuntimeError, where torch has it
        recorder.record(unsafe)
    torch.cuda.synchronize()
    assert torch.rand(4, device="cuda").shape == (4,)  # raised RuntimeError before the fix
    torch.nn.functional.dropout(x, 0.5)


def test_the_triton_kernels_compiled_inside_are_named_and_the_hook_put_back(monkeypatch):
    """A failed capture says which Triton kernels it compiled (loading one is what a capture forbids), through Triton's
    compile hook: set inside, restored after, a hook already set still called and its answer kept. Injected knobs
    (the interpreter compiles nothing); the installed Triton must still have the hook, or the diagnosis goes quiet."""
    import types

    calls = []
    knobs = types.SimpleNamespace(jit_cache_hook=lambda *a, **k: calls.append(k["repr"]) or True)
    user_hook = knobs.jit_cache_hook
    monkeypatch.setattr(shared_graphs, "_triton_runtime_knobs", lambda: knobs)
    seen: list[str] = []
    with shared_graphs.triton_compiles(seen):
        assert knobs.jit_cache_hook(repr="onlstm_step[num_warps=4](x: *fp32)") is True  # the user's answer kept
        knobs.jit_cache_hook(repr="onlstm_step[num_warps=8](x: *fp32)")
    assert seen == ["onlstm_step", "onlstm_step"] and len(calls) == 2 and knobs.jit_cache_hook is user_hook
    message = shared_graphs.compiled_during_capture(RuntimeError("operation not permitted\nmore"), seen)
    assert message == "operation not permitted (Triton compiled onlstm_step during the capture)"
    monkeypatch.undo()
    try:
        import triton  # noqa: F401
    except ImportError:
        return
    assert shared_graphs._triton_runtime_knobs() is not None  # this Triton's hook is where the recorder sets it
