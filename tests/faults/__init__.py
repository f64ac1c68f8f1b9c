"""Fault battery: real processes and real servers, faults injected, whole histories checked.

Run with pytest (``tests/faults``), or as a soak: ``python -m tests.faults --soak``.
"""
