"""The memory differential: graphs retained until backward (seed golden output 4)."""
