"""Benchmarks writing JSON."""
