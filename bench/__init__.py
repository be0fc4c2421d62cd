"""Benchmarks of the agents server (see bench/README.md)."""
