"""Z3 / normal-form meaning of the NKI (Trainium) instructions and the prover for lowerings and fusions.

Each instruction is declared once (:mod:`.declarations`: arguments, engines, memories, attribute
values, limits, latency), for the simulator and the cost model as well as for the :class:`Machine`
here; its meaning is its handler in :mod:`.vocabulary`.

A package rather than a module beside ``ops.py`` on purpose: the algebraic rules' semantics hash
covers ``semantics/*.py`` only, so the instruction semantics can change without invalidating the rule
store, while lowering and fusion proofs are checked against a hash of both (see
``axon_eg.proofs.isa_semantics_hash``).
"""

from .declarations import ACTIVATION_REDUCE_OPS, ANY_FUNCTION, DECLARATIONS, Declaration
from .instructions import ACTIVATIONS, ALU, MEANINGS, REDUCE_OPS, IllFormed, Instr, Machine, TileType
from .prove import prove_lowering, prove_same
from .vocabulary import default_space, engine

__all__ = ["ACTIVATIONS", "ACTIVATION_REDUCE_OPS", "ALU", "ANY_FUNCTION", "DECLARATIONS", "MEANINGS", "REDUCE_OPS",
           "Declaration", "IllFormed", "Instr", "Machine", "TileType", "default_space", "engine", "prove_lowering",
           "prove_same"]
