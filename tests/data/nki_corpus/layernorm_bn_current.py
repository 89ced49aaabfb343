"""Layer norm with the Vector engine's statistics instructions, as the NKI layer-norm tutorial's second version
computes it: nisa.bn_stats on each chunk of at most nl.tile_size.bn_stats_fmax columns, side by side in one
SBUF tile, then one nisa.bn_aggr over it for each row's mean and variance; rows in tiles of 128."""
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def layernorm_bn(x, weight, bias):
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    w = nl.load(weight.ap([[0, 128], [1, cols]], offset=0))
    b = nl.load(bias.ap([[0, 128], [1, cols]], offset=0))
    fmax = nl.tile_size.bn_stats_fmax
    chunks = (cols + fmax - 1) // fmax
    for i in nl.affine_range(rows // 128):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        stats = nl.ndarray((128, 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.static_range(chunks):
            width = min(fmax, cols - c * fmax)
            nisa.bn_stats(dst=stats[:, 6 * c:6 * c + 6], data=t[:, c * fmax:c * fmax + width])
        mean_var = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mean_var, data=stats)
        rstd = nl.rsqrt(nl.add(mean_var[:, 1:2], 1e-5))
        centered = nl.subtract(t, mean_var[:, 0:1])
        y = nl.add(nl.multiply(nl.multiply(centered, rstd), w), b)
        nl.store(out[i * 128:(i + 1) * 128, :], y)
    return out
