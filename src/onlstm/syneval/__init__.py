"""Targeted syntactic evaluation (Marvin & Linzen 2018), the paper's fourth experiment: does a language model
give the grammatical sentence of a minimal pair the higher probability? Guide: docs/syneval.md."""
