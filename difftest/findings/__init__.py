"""Findings: the corpus, signatures, shrinking, reproducers and rendering."""
