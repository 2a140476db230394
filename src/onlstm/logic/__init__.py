"""Logical inference (Bowman et al. 2015): formulas, relations, data generation and files.

* :mod:`.formulas` -- formulas over ``a`` … ``f`` with ``not``/``and``/``or`` in the fully
  bracketed notation of the original data; printing, parsing, operator counts, truth sets.
* :mod:`.relations` -- the 7 relations ``= < > ^ | v #`` of a pair, from the truth sets.
* :mod:`.generate` -- random labelled pairs written as ``train0`` … ``train12`` / ``test0`` … ``test12``.
* :mod:`.data` -- reading (with selection by split and operator count) and writing those files.
* :mod:`.cli` -- ``onlstm logic generate`` / ``onlstm logic check``.
"""
from .data import (
    Example, LogicDataError, bucket_of, check_file_numbers, format_line, parse_line, read_examples, read_file,
    relabel_mismatches, select, write_file,
)
from .formulas import (
    FULL_SET, VARIABLES, Binary, Formula, FormulaSyntaxError, Not, Var, count_operators, parse, to_text, truth_set,
)
from .generate import GenerateConfig, generate_dataset, random_formula
from .relations import RELATION_NAMES, RELATIONS, relation, relation_of_sets

__all__ = [
    "Binary", "Example", "FULL_SET", "Formula", "FormulaSyntaxError", "GenerateConfig", "LogicDataError", "Not",
    "RELATIONS", "RELATION_NAMES", "VARIABLES", "Var", "bucket_of", "check_file_numbers", "count_operators",
    "format_line", "generate_dataset", "parse", "parse_line", "random_formula", "read_examples", "read_file",
    "relabel_mismatches", "relation", "relation_of_sets", "select", "to_text", "truth_set", "write_file",
]
