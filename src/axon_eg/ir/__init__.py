"""Tensor IR: the operator registry, Programs, front ends and the float64 reference."""
