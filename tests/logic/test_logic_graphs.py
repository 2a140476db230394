"""`logic train`'s step as CUDA graphs over padded batches (onlstm/logic/graphs.py, issue #49). On the CPU,
onlstm.graphs.EagerRecorder stands in for CUDA's recorder: the padded layout, the buffers, the fallback are tested
here; the capture itself on a GPU (`cuda`)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from onlstm import graphs as shared_graphs
from onlstm.cli import main
from onlstm.logic import graphs
from onlstm.logic import train as logic_train
from onlstm.logic.generate import GenerateConfig, generate_dataset
from onlstm.logic.model import LogicClassifier, LogicModelConfig, collate, encode_examples

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--emb-size", "8", "--hidden-size", "8", "--mlp-hidden", "8", "--no-progress", "--threads", "1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("logic-data")
    generate_dataset(d, GenerateConfig(per_length=12, seed=3, max_ops=6, test_count=2))
    return d


@pytest.fixture
def made(monkeypatch):
    """The graphs each training made (None when it trained eagerly)."""
    seen = []

    def spy(*args, **kwargs):
        seen.append(step_graphs(*args, **kwargs))
        return seen[-1]

    step_graphs = logic_train.step_graphs
    monkeypatch.setattr(logic_train, "step_graphs", spy)
    return seen


def trained(data, out, *flags: str) -> dict[str, torch.Tensor]:
    argv = ["logic", "train", "--data", str(data), "--out", str(out), *TINY, "--batch-size", "8", "--epochs", "2"]
    assert main([*argv, *flags]) == 0
    return load_file(str(out / "model.last.safetensors"))


@pytest.mark.parametrize("cell", graphs.GRAPH_CELLS)
def test_the_padded_block_gives_the_packed_batchs_logits(cell, data):
    from onlstm.logic.data import read_examples

    config = LogicModelConfig(emb_size=6, hidden_size=8, mlp_hidden=8, cell=cell, **({"chunk_size": 4}
                              if cell == "onlstm" else {}))  # fmt: skip
    torch.manual_seed(0)
    model = LogicClassifier(config).eval()
    pairs = encode_examples(read_examples(data, split="train"))[::7][:12]  # lengths mixed
    a, al, b, bl, _ = collate(pairs)
    tokens, lengths = graphs.padded_pairs(a, al, b, bl, graphs.LENGTH_BUCKET)
    assert tokens.shape[0] % graphs.LENGTH_BUCKET == 0 and tokens.shape[0] >= max(a.shape[0], b.shape[0])
    with torch.no_grad():
        torch.testing.assert_close(model.padded_logits(tokens, lengths), model(a, al, b, bl), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", ["onlstm", "lstm"])
def test_the_graphs_train_what_the_eager_step_trains_given_the_same_masks(cell, data, tmp_path, monkeypatch, made):
    monkeypatch.setattr(shared_graphs, "GRAPH_DEVICES", ("cuda", "cpu"))
    # no embedding dropout: its masks are drawn over the padded block with graphs; DropConnect's are the same
    # (clip 0.05: every step clipped, so that a graph without its clipping trains otherwise)
    flags = ["--cell", cell, "--dropout", "0", "--dropconnect", "0.3", "--clip", "0.05"]
    flags += ["--chunk-size", "4"] if cell == "onlstm" else []
    want = trained(data, tmp_path / "eager", *flags, "--no-cuda-graphs")
    got = trained(data, tmp_path / "graphs", *flags)
    assert made[0] is None and made[1].off is None
    assert len(made[1].lengths) >= 2 and made[1].replayed >= 5  # several shapes, replayed
    # other rows (padding) in the products: equal to rounding; a wrong formula's encoding differs far more
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-6, msg=k)


def test_a_failed_recording_is_said_once_and_the_run_goes_on(data, tmp_path, monkeypatch, made, capsys):
    monkeypatch.setattr(shared_graphs, "GRAPH_DEVICES", ("cuda", "cpu"))

    def refuse(self, body):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(shared_graphs.EagerRecorder, "record", refuse)
    trained(data, tmp_path / "run", "--chunk-size", "4")
    said = [line for line in capsys.readouterr().out.splitlines() if "CUDA graphs off" in line]
    assert len(said) == 1 and "operation not permitted" in said[0] and made[0].off


def test_an_encoder_read_otherwise_trains_eagerly_and_says_why(data, tmp_path, monkeypatch, made, capsys):
    monkeypatch.setattr(shared_graphs, "GRAPH_DEVICES", ("cuda", "cpu"))
    trained(data, tmp_path / "run", "--cell", "sru")
    assert made == [None] and "the 'sru' encoder is not among" in capsys.readouterr().out


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cell", ["onlstm", "lstm"])
def test_cuda_graphs_train_what_the_eager_run_trains_given_the_same_masks(cell, data, tmp_path, made):
    flags = ["--cell", cell, "--dropout", "0", "--dropconnect", "0.3", "--clip", "0.05", "--device", "cuda"]
    flags += ["--chunk-size", "4"] if cell == "onlstm" else []
    want = trained(data, tmp_path / "eager", *flags, "--no-cuda-graphs")
    got = trained(data, tmp_path / "graphs", *flags)
    assert made[1].off is None and made[1].replayed >= 5  # captured and replayed on the GPU
    for k in want:  # the products may round otherwise under capture and with the padding rows
        torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-5, msg=k)
