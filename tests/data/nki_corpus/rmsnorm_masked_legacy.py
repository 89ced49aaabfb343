"""RMS norm over any number of rows (legacy dialect): 128-row tiles, the last one partial; its rows past the
input are left out by masks, as the NKI masking guide writes a partial tile (the row index of every
instruction on the tile is compared with the row count)."""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def rmsnorm_masked(x, weight):
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(cols)[None, :]
    w = nl.load(weight.reshape((1, cols))[i_p * 0, i_f])
    for i in nl.affine_range((rows + 127) // 128):
        inside = i * 128 + i_p < rows
        t = nl.load(x[i * 128 + i_p, i_f], mask=inside)
        ms = nl.mean(nl.multiply(t, t, mask=inside), axis=1, keepdims=True, mask=inside)
        r = nl.rsqrt(nl.add(ms, 1e-6, mask=inside), mask=inside)
        y = nl.multiply(nl.multiply(t, r, mask=inside), w, mask=inside)
        nl.store(out[i * 128 + i_p, i_f], value=y, mask=inside)
    return out
