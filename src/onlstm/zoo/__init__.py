"""Encoders beyond ON-LSTM, LSTM and GRU, one module per family; each is registered in
:mod:`onlstm.encoders` (the one registry) and documented in docs/encoders.md. Modules here may import
:mod:`onlstm.nn` and :mod:`onlstm.errors`, never an experiment package."""
