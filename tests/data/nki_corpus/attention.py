"""Fused self-attention for one head of at most 128 queries and keys: scores = q k^T / sqrt(d) on the Tensor
engine, a row softmax, then the probabilities times v (the probabilities transposed on chip to be the
stationary operand). Inputs: q and k transposed, [d, seq]; v as [seq, d]."""
import nki
import nki.language as nl


@nki.jit
def attention(q_t, k_t, v):
    d, seq = q_t.shape
    out = nl.ndarray((seq, d), dtype=nl.float32, buffer=nl.shared_hbm)
    q = nl.load(q_t)
    k = nl.load(k_t)
    vv = nl.load(v)
    scores = nl.multiply(nl.copy(nl.matmul(q, k, transpose_x=True)), 1.0 / d ** 0.5)
    m = nl.max(scores, axis=1, keepdims=True)
    e = nl.exp(nl.subtract(scores, m))
    p = nl.multiply(e, nl.reciprocal(nl.sum(e, axis=1, keepdims=True)))
    o = nl.matmul(p, vv)
    nl.store(out, nl.copy(o))
    return out
