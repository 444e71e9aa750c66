"""Triton decode-state kernels, each with a pure-torch reference beside it."""
