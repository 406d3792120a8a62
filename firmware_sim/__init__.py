"""Microcontroller targets, memory planning and integer-only execution (not built yet)."""
