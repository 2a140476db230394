"""Encoders beyond ON-LSTM and PyTorch's own RNNs, one module per family (docs/encoders.md), registered in
:mod:`onlstm.encoders`; only layers here: they import :mod:`onlstm.nn` and :mod:`onlstm.errors`, nothing else."""

from __future__ import annotations

from .qrnn import QRNN, qrnn_reference
from .sliced import SlicedRNN
from .sru import SRU, sru_reference
from .transformer import TransformerLayer

__all__ = ["QRNN", "SRU", "SlicedRNN", "TransformerLayer", "qrnn_reference", "sru_reference"]
