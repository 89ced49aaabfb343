"""A 2-D transpose of one tile: loaded, transposed on chip, copied out of PSUM, stored."""
import nki
import nki.language as nl


@nki.jit
def transpose2d(x):
    rows, cols = x.shape
    out = nl.ndarray((cols, rows), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    tt = nl.transpose(t)
    nl.store(out, nl.copy(tt, dtype=x.dtype))
    return out
