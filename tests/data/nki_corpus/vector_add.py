"""Vector add over row tiles of 128 partitions (the NKI getting-started example's shape of kernel)."""
import nki
import nki.language as nl


@nki.jit
def vector_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128:(i + 1) * 128, :])
        y = nl.load(b[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], nl.add(x, y))
    return out
