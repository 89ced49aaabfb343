"""Z3 / normal-form meaning of the NKI (Trainium) instructions and the prover for lowerings and fusions.

A package rather than a module beside ``ops.py`` on purpose: the algebraic rules' semantics hash
covers ``semantics/*.py`` only, so the instruction semantics can change without invalidating the rule
store, while lowering and fusion proofs are checked against a hash of both (see
``axon_eg.backends.nki.synthesis_store.isa_semantics_hash``).
"""

from .instructions import (
    ACTIVATION_REDUCE_OPS,
    ACTIVATIONS,
    ALU,
    ANY_FUNCTION,
    INSTRUCTIONS,
    REDUCE_OPS,
    IllFormed,
    Instr,
    Machine,
    TileType,
)
from .prove import prove_lowering, prove_same
from .vocabulary import default_space, engine

__all__ = ["ACTIVATIONS", "ACTIVATION_REDUCE_OPS", "ALU", "ANY_FUNCTION", "INSTRUCTIONS", "REDUCE_OPS", "IllFormed",
           "Instr", "Machine", "TileType", "default_space", "engine", "prove_lowering", "prove_same"]
