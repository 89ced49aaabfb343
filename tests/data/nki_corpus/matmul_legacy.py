"""Tiled matmul in the legacy neuronxcc.nki dialect, returning instructions: out[M, N] = lhs_t.T @ rhs with
lhs_t [K, M] and rhs [K, N]; the stationary tiles of each 128-row block are loaded once into a buffer with a
block axis before the partition axis (nl.par_dim), each PSUM tile accumulates nc_matmul results with +=."""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_tiled(lhs_t, rhs):
    k_size, m_size = lhs_t.shape
    n_size = rhs.shape[1]
    tk, tm, tn = 128, 128, 512
    out = nl.ndarray((m_size, n_size), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // tm):
        stationary = nl.ndarray((k_size // tk, nl.par_dim(tk), tm), dtype=lhs_t.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(k_size // tk):
            stationary[k] = nl.load(lhs_t[k * tk:(k + 1) * tk, m * tm:(m + 1) * tm])
        for n in nl.affine_range(n_size // tn):
            acc = nl.zeros((tm, tn), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // tk):
                moving = nl.load(rhs[k * tk:(k + 1) * tk, n * tn:(n + 1) * tn])
                acc += nisa.nc_matmul(stationary[k], moving)
            res = nl.copy(acc, dtype=nl.float32)
            nl.store(out[m * tm:(m + 1) * tm, n * tn:(n + 1) * tn], value=res)
    return out
