"""Operators of the toolkit: one folder per op (sources, Python surface, reference).

Load one with ``jit_loader.load("<op>")``; see README.md for the anatomy of an op.
"""
