# Program 'rmsnorm', hash 0c1a3796f4ef197bbe1e7421f5ed51d9d6a198cbe767f914b7f4afa8cf33626b, lowered to PyTorch by axon_eg.backends.torch.
#   eager: the baseline in the inputs' dtypes; compiled: torch.compile of it (built on first call);
#   reference: the same code in float64 (CUDA when available), NumPy arrays in and out.
#
# program rmsnorm(x: bf16[M, N], w: bf16[N]) -> bf16[M, N]  where M=8192, N=8192
#   %2 = rmsnorm(x, w, axes=(1,), eps=1e-06)       : bf16[M, N]
#   return %2
import torch
import torch.nn.functional as F

INPUTS = ('x', 'w')


def forward(x, w):
    v2 = F.rms_norm(x, (8192,), weight=w, eps=1e-06)
    return v2


def forward_float64(x, w):
    v2 = F.rms_norm(x, (8192,), weight=w, eps=1e-06)
    return v2


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
