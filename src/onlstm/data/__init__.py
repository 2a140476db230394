"""Corpora and readers (PTB text, treebank ``.mrg`` files, ...); import the sub-modules directly, e.g.
``from onlstm.data.treebank import load_wsj10``."""
