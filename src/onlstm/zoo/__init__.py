"""Encoders beyond ON-LSTM and PyTorch's own RNNs, one module per family (docs/encoders.md).

They are registered by name in :mod:`onlstm.encoders` (the one registry); this package holds only the
layers, so it may import :mod:`onlstm.nn` and :mod:`onlstm.errors`, never an experiment package.
"""

from __future__ import annotations

from .qrnn import QRNN, qrnn_reference
from .sliced import SlicedRNN
from .sru import SRU, sru_reference
from .transformer import TransformerLayer

__all__ = ["QRNN", "SRU", "SlicedRNN", "TransformerLayer", "qrnn_reference", "sru_reference"]
