"""The ON-LSTM layer: functional pieces, the cell, the multi-layer module and its kernels."""
from .functional import cumax, master_forget, master_input
from .modules import ONLSTM, ONLSTMCell, Distances, dropconnect_weight

__all__ = ["cumax", "master_forget", "master_input", "ONLSTM", "ONLSTMCell", "Distances", "dropconnect_weight"]
