"""The NKI (AWS Trainium) backend: the instruction vocabulary (:mod:`.isa`), a NumPy simulator that runs
emitted NKI kernel source in either NKI dialect (:mod:`.simulator`), sketch synthesis and the emitter.

Without a Trainium, NKI candidates are checked in the simulator and ranked by the Trainium cost model;
every number about the chip comes from ``data/hw_costs/trn*.yaml``.
"""
