"""The call every Triton-to-Triton candidate ends with, shared by the input's stages (:mod:`.run`) and axon_eg's
own νGraph kernels (:mod:`.nugraph`)."""

CALL = '''_AXON_EG_MODEL = None


def _axon_eg_entry(*inputs):
    global _AXON_EG_MODEL
    if _AXON_EG_MODEL is None:
        _axon_eg_torch.manual_seed(0)
        _AXON_EG_MODEL = {wrapper}(*_AXON_EG_INIT).to(inputs[0].device).eval()
    with _axon_eg_torch.no_grad():
        return _AXON_EG_MODEL(*inputs)
'''
"""How the harness calls every candidate: the wrapper (``{wrapper}``) built once, seeded with 0, from the
``__init__`` arguments (``_AXON_EG_INIT``), on the inputs' device, called under ``no_grad``; the end of
``run.ENTRY`` and of the νGraph kernels' entry (``nugraph.ENTRY``)."""
