"""Encoders beyond ON-LSTM and PyTorch's own RNNs, one module per family (docs/encoders.md).

They are registered by name in :mod:`onlstm.encoders` (the one registry); this package holds only the
layers, so it imports nothing from the project but itself (and may use :mod:`onlstm.nn`).
"""

from __future__ import annotations

from .qrnn import QRNN, qrnn_reference
from .sru import SRU, sru_reference

__all__ = ["QRNN", "SRU", "qrnn_reference", "sru_reference"]
