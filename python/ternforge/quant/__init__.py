"""Quantizers and the quantize -> pack interchange writer."""
