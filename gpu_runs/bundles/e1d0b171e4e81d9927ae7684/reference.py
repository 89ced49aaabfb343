# Program 'softmax', hash 1caa6cc4dd9f669b25eabfa81461ba4a7aa0a163bb3876f58974a935a6940c87, lowered to PyTorch by axon_eg.backends.torch.
#   eager: the baseline in the inputs' dtypes; compiled: torch.compile of it (built on first call);
#   reference: the same code in float64 (CUDA when available), NumPy arrays in and out.
#
# program softmax(x: bf16[M, N]) -> bf16[M, N]  where M=8192, N=8192
#   %1 = softmax(x, axis=1)                        : bf16[M, N]
#   return %1
import torch
import torch.nn.functional as F

INPUTS = ('x',)


def forward(x):
    v1 = torch.softmax(x, dim=-1)
    return v1


def forward_float64(x):
    v1 = torch.softmax(x, dim=-1)
    return v1


def eager(*inputs):
    """The PyTorch baseline: the program in its inputs' dtypes (one tensor, or a tuple)."""
    return forward(*inputs)


_compiled = None


def compiled(*inputs):
    """torch.compile(eager, mode="max-autotune-no-cudagraphs"), compiled on the first call."""
    global _compiled
    if _compiled is None:
        _compiled = torch.compile(eager, mode="max-autotune-no-cudagraphs")
    return _compiled(*inputs)


def reference(*arrays):
    """The program in float64: NumPy arrays in (program input order), NumPy float64 arrays out."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tensors = [torch.as_tensor(a, dtype=torch.float64, device=device) for a in arrays]
    with torch.no_grad():
        out = forward_float64(*tensors)
    if isinstance(out, tuple):
        return tuple(t.cpu().numpy() for t in out)
    return out.cpu().numpy()


def reference_torch(*tensors):
    """The program in float64 on the tensors' device: torch tensors in and out (the harness's fast path
    for large programs, nothing leaves the GPU)."""
    with torch.no_grad():
        return forward_float64(*(t.to(torch.float64) for t in tensors))


reference_torch._takes_torch = True
