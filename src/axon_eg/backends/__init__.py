"""Code generators that turn Programs into runnable kernels or reference code (Triton, PyTorch)."""
