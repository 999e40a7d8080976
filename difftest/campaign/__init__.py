"""Campaigns: generate programs, check each (the oracle), triage and shrink what fails (findings),
save it to the corpus. `loop` runs one worker's share, `parallel` runs jobs over processes,
`claims` re-checks and shrinks a claimed finding, `summary` counts and prints. The top layer
under the CLI and the pytest plugin."""
