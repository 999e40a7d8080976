"""The oracle: the semantic model of both frameworks' autodiff state, the comparison of what
they report, and the float64 arbitration of numeric mismatches."""
