"""Normal-form terms to Z3, purified: every remaining sum or max/min reduction becomes a fresh real
variable (memoized by its canonical form), and only the ground axiom instances the query needs
are added (exp is positive, exp(a) exp(-a) = 1, a sum of positive terms over a non-empty range is
positive, monotonicity between two applications of an increasing function, sqrt is >= 0 on its
domain). Sound for ``unsat``: a proof never depends on what purification forgot.

Partial functions are uninterpreted outside their domain (log(p) for p <= 0 is an arbitrary real, as
is Z3's p / 0): no axiom says anything about such an application, so a proof holds for every value
NaN could be replaced by; the prover adds the domain conditions (``nf`` "dom" atoms, ``condition``)
as facts where it needs them."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import z3

from . import domains, nf
from .nf import Ix, Mono, Poly

# Strictly increasing functions: a < b -> f(a) < f(b) between any two applications. exp, tanh and erf
# are increasing on all reals; log and sqrt only on their domains (p > 0, p >= 0: ``domains.fn_domain``),
# so their instances also require both arguments inside it (f(-1) vs f(4) is unconstrained).
MONOTONE = {"exp", "log", "sqrt", "tanh", "erf"}
RELATIONS = {">0": lambda z: z > 0, ">=0": lambda z: z >= 0, "!=0": lambda z: z != 0}


@dataclass
class Z3Context:
    ints: dict[str, z3.ArithRef] = field(default_factory=dict)
    reals: dict[str, z3.ArithRef] = field(default_factory=dict)
    funcs: dict[tuple, z3.FuncDeclRef] = field(default_factory=dict)
    purified: dict[str, z3.ArithRef] = field(default_factory=dict)
    axioms: list[z3.BoolRef] = field(default_factory=list)
    exps: dict[str, tuple[Poly, z3.ArithRef]] = field(default_factory=dict)
    positive: dict[str, z3.ArithRef] = field(default_factory=dict)  # known-positive terms, by repr
    lemmas: set[str] = field(default_factory=set)
    applications: dict[str, dict[str, tuple]] = field(default_factory=dict)

    # -- integers ----------------------------------------------------------------------------------
    def int_sym(self, name: str) -> z3.ArithRef:
        if name not in self.ints:
            self.ints[name] = z3.Int(name)
        return self.ints[name]

    def ix(self, e: Ix) -> z3.ArithRef:
        out: Any = z3.IntVal(e.const)
        for s, c in e.terms:
            if isinstance(s, str):
                term = self.int_sym(s)
            elif s[0] == "div":
                term = self.ix(s[1]) / self.ix(s[2])
            elif s[0] == "mod":
                term = self.ix(s[1]) % self.ix(s[2])
            else:
                term = self.ix(s[1]) * self.ix(s[2])
            out = out + (term if c == 1 else c * term)
        return out

    # -- reals -------------------------------------------------------------------------------------
    def real(self, name: str) -> z3.ArithRef:
        if name not in self.reals:
            self.reals[name] = z3.Real(name)
        return self.reals[name]

    def func(self, name: str, arity: int, sort: Any = None) -> z3.FuncDeclRef:
        key = (name, arity, str(sort))
        if key not in self.funcs:
            domain = sort if sort is not None else [z3.IntSort()] * arity
            self.funcs[key] = z3.Function(name, *domain, z3.RealSort())
        return self.funcs[key]

    def poly(self, p: Poly) -> z3.ArithRef:
        terms = [self.mono(m) for m in p.monos]
        if not terms:
            return z3.RealVal(0)
        return z3.Sum(terms) if len(terms) > 1 else terms[0]

    def mono(self, m: Mono) -> z3.ArithRef:
        bound = {v for v, _ in m.binders}
        outside = [f for f in m.factors if not nf.atom_symbols(f) & bound]
        inside = [f for f in m.factors if nf.atom_symbols(f) & bound]
        value: Any = _rv(m.coeff)
        for f in outside:  # linearity: factors that ignore the binders stay outside the sum
            value = value * self.atom(f)
        if m.binders:
            value = value * self.sum_var(m.binders, tuple(inside))
        return value

    def sum_var(self, binders: tuple, inside: tuple) -> z3.ArithRef:
        key = "SUM" + repr((binders, inside))
        if key not in self.purified:
            var = z3.Real(f"sum{len(self.purified)}")
            self.purified[key] = var
            self.lemmas.update({"sum_linearity", "sum_additivity", "sum_swap"})
            if inside and all(self._is_positive(f) for f in inside):
                lengths = [self.ix(n) for _, n in binders]
                self.axioms.append(z3.Implies(z3.And([n >= 1 for n in lengths]), var > 0))
                self.lemmas.add("sum_positive")
        return self.purified[key]

    def _is_positive(self, a: nf.Atom) -> bool:
        return a[0] == "fn" and a[1] == "exp"

    def atom(self, a: nf.Atom) -> z3.ArithRef:
        tag = a[0]
        if tag == "in":
            if not a[2]:
                return self.real(f"in_{a[1]}")
            return self.func(f"in_{a[1]}", len(a[2]))(*[self.ix(i) for i in a[2]])
        if tag == "sym":
            return self.real(f"sym_{a[1]}")
        if tag == "dim":
            return z3.ToReal(self.ix(a[1]))
        if tag == "fn":
            arg = self.poly(a[2])
            value = self.func(f"fn_{a[1]}", 1, [z3.RealSort()])(arg)
            rel = domains.fn_domain(a[1])
            if a[1] in MONOTONE:  # ground monotonicity instances against the same function's other uses
                seen = self.applications.setdefault(a[1], {})
                if repr(a[2]) not in seen:
                    for other_arg, other in seen.values():
                        both = [RELATIONS[rel](arg), RELATIONS[rel](other_arg)] if rel else []
                        self.axioms.append(z3.Implies(z3.And(*both, arg < other_arg), value < other))
                        self.axioms.append(z3.Implies(z3.And(*both, other_arg < arg), other < value))
                    seen[repr(a[2])] = (arg, value)
                    if len(seen) > 1:
                        self.lemmas.add("monotonicity")
                    if a[1] == "sqrt":
                        self.axioms.append(z3.Implies(arg >= 0, value >= 0))
                        self.axioms.append(z3.Implies(arg > 0, value > 0))
            if a[1] == "exp":
                key = repr(a[2])
                if key not in self.exps:
                    self.axioms.append(value > 0)
                    for other_poly, other in self.exps.values():  # exp(a) exp(-a) = 1
                        if (other_poly + a[2]).is_zero:
                            self.axioms.append(value * other == 1)
                            self.lemmas.add("exp_inverse")
                    self.exps[key] = (a[2], value)
            return value
        if tag == "recip":
            return 1 / self.poly(a[1])
        if tag == "ite":
            op, x, y = a[1]
            zx = self.ix(x) if isinstance(x, Ix) else self.poly(x)
            zy = self.ix(y) if isinstance(y, Ix) else self.poly(y)
            cond = {"<": zx < zy, "<=": zx <= zy, "==": zx == zy}[op]
            return z3.If(cond, self.poly(a[2]), self.poly(a[3]))
        if tag == "red":
            key = "RED" + repr(a)
            if key not in self.purified:
                self.purified[key] = z3.Real(f"{a[1]}{len(self.purified)}")
            return self.purified[key]
        if tag == "lib":
            arrays = []
            for names, body in a[3]:
                variables = [z3.Int(n) for n in names]
                saved = {n: self.ints.get(n) for n in names}
                for n, v in zip(names, variables):
                    self.ints[n] = v
                arrays.append(z3.Lambda(variables, self.poly(body)) if variables else self.poly(body))
                for n, v in saved.items():
                    if v is None:
                        self.ints.pop(n, None)
                    else:
                        self.ints[n] = v
            sorts = [arr.sort() for arr in arrays] + [z3.IntSort()] * len(a[4])
            f = self.func(f"lib_{a[1]}_{abs(hash(a[2]))}", len(sorts), sorts)
            return f(*arrays, *[self.ix(i) for i in a[4]])
        raise ValueError(f"unknown atom {tag}")


    # -- domain conditions ---------------------------------------------------------------------------
    def condition(self, c: nf.Atom, at: dict[str, Ix] | None = None) -> z3.BoolRef | None:
        """The condition ``c`` (a binder-free one, or its binders replaced by ``at``) as a formula;
        None for a library op's condition, which has no formula."""
        rel, binders, body = c[1], c[2], c[3]
        if rel == "lib":
            return None
        if binders:
            body = body.subst({v: (at or {})[v] for v, _ in binders})
        return RELATIONS[rel](self.poly(body))


def _rv(c: Fraction) -> z3.ArithRef:
    return z3.RealVal(f"{c.numerator}/{c.denominator}") if c.denominator != 1 else z3.RealVal(c.numerator)
