"""Corpora and readers: treebank .mrg files, vocabularies (more to come: PTB text, syntactic pairs)."""
