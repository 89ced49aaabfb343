"""The call every Triton-to-Triton candidate ends with, shared by the input's stages (:mod:`.run`) and axon_eg's
own νGraph kernels (:mod:`.nugraph`)."""

CALL = '''_AXON_EG_MODEL = None


def _axon_eg_entry(*inputs):
    global _AXON_EG_MODEL
    if _AXON_EG_MODEL is None:
        _axon_eg_torch.manual_seed(0)
        _AXON_EG_MODEL = {wrapper}(*_AXON_EG_INIT).to(inputs[0].device).eval()
        _axon_eg_share(_AXON_EG_MODEL)
    with _axon_eg_torch.no_grad():
        return _AXON_EG_MODEL(*inputs)
'''
"""How the harness calls every candidate: the wrapper (``{wrapper}``) built once, seeded with 0, from the
``__init__`` arguments (``_AXON_EG_INIT``), on the inputs' device, given the reference's parameters where the
entry's ``_axon_eg_share`` says (``SHARE``), called under ``no_grad``; the end of ``run.ENTRY`` and of the νGraph
kernels' entry (``nugraph.ENTRY``, whose wrapper reads the reference's own)."""

SHARE = '''_AXON_EG_SHARE = {share!r}
"""(the input's tensor, the reference's, transposed): the reference's parameters, matched when the run was prepared."""


def _axon_eg_share(model):
    """The reference Model's parameters and buffers (built as the reference is: seed 0, the same arguments, the run's
    module constants) copied into the input's, cast to its dtypes, so both compute with the same weights."""
    if not _AXON_EG_SHARE:
        return
    import importlib.util
    import pathlib

    spec = importlib.util.spec_from_file_location("axon_eg_shared_reference",
                                                  pathlib.Path(__file__).with_name("reference_model.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, value in {ref_constants!r}.items():
        setattr(mod, name, value)
    with _axon_eg_torch.random.fork_rng(devices=[]):
        _axon_eg_torch.manual_seed(0)
        ref = mod.Model(*_AXON_EG_INIT)
    theirs = dict(ref.named_parameters())
    theirs.update(ref.named_buffers())
    mine = dict(model.named_parameters())
    mine.update(model.named_buffers())
    with _axon_eg_torch.no_grad():
        for a, b, transposed in _AXON_EG_SHARE:
            src = theirs[b].t() if transposed else theirs[b]
            mine[a].copy_(src.to(device=mine[a].device, dtype=mine[a].dtype))
'''
"""The input's ``_axon_eg_share`` (:mod:`.params` matches the tensors); the νGraph kernels' entry defines a no-op."""
