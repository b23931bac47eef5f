"""Benchmarks, run by hand (``python -m bench.<name>``); see BENCHMARKS.md in shared/."""
