"""Declared knowledge: divergences between burn and PyTorch, conventions at kinks, known burn
bugs, as data (`difftest rules` lists it)."""
