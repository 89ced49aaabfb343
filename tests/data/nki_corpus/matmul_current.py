"""Tiled matmul in the current dialect, destination-passing instructions: out[M, N] = lhs_t.T @ rhs with
lhs_t [K, M] and rhs [K, N]; for each 128-row block the stationary tiles are loaded once (hoisted out of the
N loop), each PSUM tile accumulates over K with nc_matmul(accumulate=True)."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_tiled(lhs_t, rhs):
    k_size, m_size = lhs_t.shape
    n_size = rhs.shape[1]
    tk, tm, tn = 128, 128, 512
    out = nl.ndarray((m_size, n_size), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // tm):
        stationary = nl.ndarray((tk, k_size // tk, tm), dtype=lhs_t.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(k_size // tk):
            nisa.dma_copy(dst=stationary[:, k, :], src=lhs_t[k * tk:(k + 1) * tk, m * tm:(m + 1) * tm])
        for n in nl.affine_range(n_size // tn):
            acc = nl.zeros((tm, tn), dtype=nl.float32, buffer=nl.psum)  # accumulate=True adds to what it holds
            for k in nl.affine_range(k_size // tk):
                moving = nl.ndarray((tk, tn), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=moving, src=rhs[k * tk:(k + 1) * tk, n * tn:(n + 1) * tn])
                nisa.nc_matmul(dst=acc, stationary=stationary[:, k, :], moving=moving, accumulate=True)
            res = nl.ndarray((tm, tn), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * tm:(m + 1) * tm, n * tn:(n + 1) * tn], src=res)
    return out
