"""Benchmarks: each writes JSON to bench/results/ and compares with a baseline in the same run."""
