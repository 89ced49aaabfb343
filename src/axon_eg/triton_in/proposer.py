"""Proposers: stages that need a language model, behind one small protocol, in a generate-verify-refine loop.

A :class:`Proposer` takes the current source and the cascade's diagnostics of its last proposal (None the
first time) and returns a whole new source. :func:`refine` runs the loop: each proposal first meets the
fixed-harness rule (``stages.wrapper_unchanged``: only kernels and their launches' keyword arguments may
change; a proposal that edits the wrapper, the inputs or the module's constants is refused there, at the
``wrapper`` stage), then the cascade of the measurement worker (syntax, structure, correctness against the
float64 reference on fresh random inputs with poisoned outputs, on a GPU timing; a proposal that does not
parse stops at syntax, first); what it reports goes back
to the proposer as the next diagnostics. A proposal that passes is a candidate like any stage's.

:class:`OpenAICompatible` is the adapter for an OpenAI-compatible chat-completions endpoint given by
configuration (``url``, ``model``, the name of the environment variable holding the key); it uses only the
standard library and takes the last fenced Python block of the reply as the proposal.
"""

from __future__ import annotations

import ast
import json
import os
import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .source import TritonFile
from .stages import wrapper_unchanged


class Proposer(Protocol):
    def propose(self, source: str, diagnostics: str | None) -> str: ...


@dataclass
class Attempt:
    """One proposal and what became of it: ``stage`` where it stopped (``wrapper``, or the cascade's stage:
    ``done`` for a proposal that passed), ``status`` (``ok``, ``wrapper_changed`` or the cascade's), and the
    diagnostics fed back."""

    round: int
    text: str
    stage: str
    status: str
    diagnostics: str | None


def refine(tf: TritonFile, proposer: Proposer, check: Callable[[str], dict[str, Any]],
           rounds: int = 3) -> list[Attempt]:
    """Up to ``rounds`` proposals, each built on the last one that passed (the input at first), stopping at
    the first that passes. ``check(text)`` runs the cascade on one candidate file and returns its row."""
    attempts: list[Attempt] = []
    current, diagnostics = tf.text, None
    for r in range(rounds):
        try:
            text = proposer.propose(current, diagnostics)
        except Exception as exc:  # noqa: BLE001 - a proposer that fails is an attempt, never an aborted run
            attempts.append(Attempt(r, "", "propose", "proposer_error", f"{type(exc).__name__}: {exc}"))
            break
        try:  # the cascade's first stage, before the harness rule reads the file
            ast.parse(text)
        except SyntaxError as exc:
            diagnostics = f"the cascade stopped it at syntax: syntax_error: line {exc.lineno}: {exc.msg}"
            attempts.append(Attempt(r, text, "syntax", "syntax_error", diagnostics))
            continue
        why = wrapper_unchanged(tf, text)
        if why is not None:
            diagnostics = (f"refused before running: {why}. Only the @triton.jit kernels and the keyword arguments "
                           "of their launches may change; the wrappers, input generation and timing are fixed.")
            attempts.append(Attempt(r, text, "wrapper", "wrapper_changed", diagnostics))
            continue
        row = check(text)
        if row.get("status") == "ok":
            attempts.append(Attempt(r, text, row.get("stage", "done"), "ok", None))
            break
        diagnostics = f"the cascade stopped it at {row.get('stage')}: {row.get('status')}: {row.get('error')}"
        attempts.append(Attempt(r, text, str(row.get("stage")), str(row.get("status")), diagnostics))
    return attempts


PROMPT = """You optimize Triton GPU kernels. Return the whole Python file in one ```python block.
Change only the bodies and decorators of the @triton.jit kernels and the keyword arguments of their launches;
everything else must stay byte for byte (it is checked, and the wrappers, inputs and timing are fixed).
{diagnostics}
```python
{source}
```"""


@dataclass
class OpenAICompatible:
    """A proposer on an OpenAI-compatible ``/chat/completions`` endpoint (see the module docstring)."""

    url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 120.0
    temperature: float = 0.2

    def propose(self, source: str, diagnostics: str | None) -> str:
        note = f"Your last proposal failed: {diagnostics}\nFix that." if diagnostics else ""
        body = {"model": self.model, "temperature": self.temperature,
                "messages": [{"role": "user", "content": PROMPT.format(diagnostics=note, source=source)}]}
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url.rstrip("/") + "/chat/completions", json.dumps(body).encode(),
                                         headers)
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 - configured URL
            reply = json.loads(response.read())
        text = reply["choices"][0]["message"]["content"]
        blocks = re.findall(r"```(?:python)?\n(.*?)```", text, flags=re.S)
        if not blocks:
            raise ValueError("the reply has no fenced code block")
        return blocks[-1]


__all__ = ["Attempt", "OpenAICompatible", "Proposer", "refine"]
