"""Execution: the PyTorch executor, the difftest-burn worker client, one program through both
(`runner`), and campaigns (sequential and parallel)."""
