"""Execution: running a program in each framework and nothing more. The PyTorch executor
(`torch_exec`, with its modules, sessions and root probes), the difftest-burn worker client
(`burn_worker`) and the builds of other burn versions (`burn_builds`). Judging what they observe
is the oracle's (difftest/oracle/, one layer up); campaigns are difftest/campaign/."""
