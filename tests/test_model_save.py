"""``fast = ax.optimize(model, inputs); fast.save("model_new.py")`` (issue 48, item 2), as a user runs it: the
README's code in a script run with ``python`` (no ``__main__`` guard), then the saved file imported in another
fresh process that refuses any import of axon_eg. The saved file holds only the model's class and what it
needs of the script (never the script's top-level calls: importing it does not optimize again or rewrite
itself), the kernels and ``ModelNew``; for an ``nn.Sequential`` it imports torch's class and rebuilds the tree
with ``get_init_inputs()``. Both give the original's outputs, with its weights from the same seed or from its
state_dict, and meta tensors on the meta device. The extraction itself (``model_new.extract``) is checked on
sources without running anything."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from axon_eg.errors import InvalidArgument
from axon_eg.model_new import class_source, extract
from axon_eg.testing.subprocesses import NO_AXON_EG_IMPORT

SCRIPT = '''
import torch
import torch.nn as nn
import axon_eg as ax
from pathlib import Path

print("USER_SCRIPT_RAN")  # must not run again when the saved file is imported
runs = Path("runs.txt")
runs.write_text(str(int(runs.read_text()) + 1 if runs.exists() else 1))
SCALE = 2.0


def helper(t):
    return torch.softmax(t * SCALE, dim=-1)


class Base(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)


class Model(Base):
    def forward(self, x):
        return helper(self.lin(x)) + OFFSET


OFFSET = 0.5


def unused():
    return ax.optimize  # not needed by Model: must not be kept (it would need axon_eg)


torch.manual_seed(0)
model = Model(16).eval()
x = torch.randn(4, 16)
fast = ax.optimize(model, (x,), k=1, saturation_s=0.3)
with torch.no_grad():
    y = fast(x)
fast.save("model_new.py")

torch.manual_seed(0)
seq = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8), nn.LayerNorm(8)).eval()
fast_seq = ax.optimize(seq, (x,), k=1, saturation_s=0.3)
fast_seq.save("seq_new.py")
with torch.no_grad():
    torch.save({"x": x, "model": model(x), "fast": y, "seq": seq(x), "fast_seq": fast_seq(x),
                "model_state": model.state_dict(), "seq_state": seq.state_dict()}, "want.pt")
print("AXON_KERNELS", json.dumps([r.kernel is not None for r in fast.report + fast_seq.report]))
'''.replace("from pathlib import Path", "import json\nfrom pathlib import Path")

CHECK = NO_AXON_EG_IMPORT + '''
import importlib.util, json, os, sys

import torch

def load(name):
    spec = importlib.util.spec_from_file_location(name[:-3], name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

stamp = os.stat("model_new.py").st_mtime_ns
mod, seq = load("model_new.py"), load("seq_new.py")
want = torch.load("want.pt")
x = want["x"]
out = {}
with torch.no_grad():
    torch.manual_seed(0)
    new = mod.ModelNew(16).eval()  # the same __init__ arguments and seed as the original
    out["same_weights"] = all(torch.equal(v, want["model_state"][k]) for k, v in new.state_dict().items())
    out["model"] = float((new(x) - want["model"]).abs().max())
    out["model_vs_fast"] = float((new(x) - want["fast"]).abs().max())
    loaded = mod.ModelNew(16).eval()
    loaded.load_state_dict(want["model_state"])
    out["model_loaded"] = float((loaded(x) - want["model"]).abs().max())
    built = mod.Model(16).eval()  # a model built elsewhere, wrapped: its parameters shared
    built.load_state_dict(want["model_state"])
    wrapped = mod.ModelNew.from_module(built)
    out["from_module"] = float((wrapped(x) - want["model"]).abs().max())
    out["shared"] = wrapped.lin.weight is built.lin.weight
    torch.manual_seed(0)
    s = seq.ModelNew(*seq.get_init_inputs()).eval()
    out["seq_same_weights"] = all(torch.equal(v, want["seq_state"][k]) for k, v in s.state_dict().items())
    out["seq"] = float((s(x) - want["seq"]).abs().max())
    out["seq_vs_fast"] = float((s(x) - want["fast_seq"]).abs().max())
    out["seq_inputs"] = [list(t.shape) for t in seq.get_inputs()]
    with torch.device("meta"):
        m = mod.ModelNew(16).eval()
        y = m(torch.empty(4, 16))
    out["meta"] = [str(y.device), list(y.shape), str(y.dtype)]
from torch._inductor.codecache import PyCodeCache
made = PyCodeCache.modules.values() if isinstance(PyCodeCache.modules, dict) else PyCodeCache.modules
out["inductor_calls_regions"] = any("torch.ops.axon_eg_saved." in open(m.__file__).read() for m in made)
out["axon_eg_loaded"] = [m for m in sys.modules if m.split(".")[0] == "axon_eg"]
out["rewritten"] = os.stat("model_new.py").st_mtime_ns != stamp
out["runs"] = open("runs.txt").read()
print("AXON_CHECK", json.dumps(out))
'''


@pytest.mark.slow  # a fresh process compiling the saved file: 15-20 s (make test-slow, CI)
def test_saved_model_new_has_only_the_class_and_runs_alone_in_a_fresh_process(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1", "AXON_EG_CACHE": str(tmp_path / "cache"), "AXON_EG_FORCE_CPU": "1"}
    (tmp_path / "user_script.py").write_text(SCRIPT)
    proc = subprocess.run([sys.executable, "user_script.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kernels = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("AXON_KERNELS")).split(" ", 1)[1])
    assert kernels and all(kernels), proc.stdout[-2000:]

    text = (tmp_path / "model_new.py").read_text()
    assert "class Model(Base):" in text and "class Base(nn.Module):" in text and "def helper(t):" in text
    assert "SCALE = 2.0" in text and "OFFSET = 0.5" in text and "import torch.nn as nn" in text
    for gone in ("USER_SCRIPT_RAN", "ax.optimize", "axon_eg as ax", "def unused", "model = Model(16)", ".save("):
        assert gone not in text, gone
    seq_text = (tmp_path / "seq_new.py").read_text()
    assert "class ModelNew(torch.nn.Sequential):" in seq_text and "def get_init_inputs():" in seq_text
    assert "container.py" not in seq_text and "class Sequential" not in seq_text and "USER_SCRIPT_RAN" not in seq_text

    check = subprocess.run([sys.executable, "-c", CHECK], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    line = next((ln for ln in check.stdout.splitlines() if ln.startswith("AXON_CHECK")), None)
    assert line is not None, check.stderr[-3000:]
    assert "USER_SCRIPT_RAN" not in check.stdout
    got = json.loads(line.split(" ", 1)[1])
    assert got["runs"] == "1" and not got["rewritten"] and got["axon_eg_loaded"] == [], got
    assert got["same_weights"] and got["seq_same_weights"], got
    assert got["shared"], got
    assert got["inductor_calls_regions"], got  # forward through torch.compile, the regions its opaque ops
    for key in ("model", "model_vs_fast", "model_loaded", "from_module", "seq", "seq_vs_fast"):
        assert got[key] < 1e-5, (key, got)
    assert got["seq_inputs"] == [[4, 16]]
    assert got["meta"] == ["meta", [4, 16], "torch.float32"], got


# ------------------------------------------------------------------------------------------------
# The extraction, on sources (nothing runs)
# ------------------------------------------------------------------------------------------------
def _extract(source: str, name: str = "Model", **kw):
    return extract(textwrap.dedent(source), "/somewhere/user.py", name, **kw)


def test_only_what_the_class_needs_is_kept_and_nothing_that_runs():
    src = _extract('''
        from __future__ import annotations
        import os, torch
        import numpy as np
        try:
            import einops
        except ImportError:
            einops = None
        import axon_eg as ax
        from torch import nn

        SIZES = {"d": 4}
        SIZES["e"] = 5
        EPS = 1e-6
        torch.manual_seed(0)

        @torch.no_grad()
        def helper(t: ax.Tensor, k=EPS):
            return [t * k for _ in range(2)]

        class Norm(nn.Module):
            pass

        class Model(Norm):
            scale = np.float32(2)

            def forward(self, x):
                x = helper(x)[0]
                return x + einops_ok(x)

        def einops_ok(t):
            return t if einops is None else t

        def get_inputs():
            return [torch.randn(SIZES["d"], SIZES["e"])]

        model = Model()
        fast = ax.optimize(model, get_inputs())
        for i in range(3):
            print(i)
        if __name__ == "__main__":
            fast.save("model_new.py")
    ''')
    assert src.future == ["from __future__ import annotations"]
    kept = set(src.kept)
    assert {"Model", "Norm", "helper", "einops_ok", "einops", "EPS", "SIZES", "np", "torch", "nn", "get_inputs"} <= kept
    assert not {"os", "ax", "model", "fast", "i"} & kept, kept
    code = src.code
    assert "import torch\n" in code and "import os" not in code  # `import os, torch` keeps torch only
    assert 'SIZES["e"] = 5' in code and "except ImportError" in code  # a change of a kept name; a guarded import
    for gone in ("manual_seed", "ax.optimize", "print(", "__main__", "model = Model()"):
        assert gone not in code, gone
    compile(code, "saved", "exec")


def test_annotations_are_needed_only_where_they_run():
    """An annotation runs at the def unless ``from __future__ import annotations``: only then is what it
    names needed (here axon_eg, refused)."""
    body = '''
        import torch
        import axon_eg as ax

        class Model(torch.nn.Module):
            def forward(self, x: ax.Tensor) -> ax.Tensor:
                return x
    '''
    with pytest.raises(InvalidArgument, match="Model uses axon_eg"):
        _extract(body)
    src = _extract("from __future__ import annotations\n" + textwrap.dedent(body))
    assert "axon_eg" not in src.code and "ax" not in src.kept


def test_what_cannot_be_kept_is_refused_naming_it():
    with pytest.raises(InvalidArgument, match=r"Model uses axon_eg \(user.py:3 imports axon_eg\.ir"):
        _extract('''
            import torch
            from axon_eg.ir import frontend

            class Model(torch.nn.Module):
                def forward(self, x):
                    return frontend.relu(x)
        ''')
    with pytest.raises(InvalidArgument, match=r"needs 'WIDTH', which user.py sets only at line 4 in a `for` statement"):
        _extract('''
            import torch

            for WIDTH in (4, 8):
                pass

            class Model(torch.nn.Module):
                def forward(self, x):
                    return x * WIDTH
        ''')
    with pytest.raises(InvalidArgument, match=r"build.<locals>.Model is defined inside a function"):
        _extract("import torch\n", qualname="build.<locals>.Model")
    with pytest.raises(InvalidArgument, match="has no top-level `class Model`"):
        _extract("import torch\nModel = torch.nn.Linear\n")


def test_a_relative_import_is_made_absolute():
    src = _extract('''
        from .layers import Block, unused
        from ..common import EPS

        class Model(Block):
            eps = EPS
    ''', module_name="proj.models.net")
    assert "from proj.models.layers import Block\n" in src.code + "\n" and "from proj.common import EPS" in src.code
    assert "unused" not in src.code
    with pytest.raises(InvalidArgument, match="relative import"):
        _extract("from .layers import Block\nclass Model(Block):\n    pass\n")


def test_a_class_defined_under_an_if_of_definitions_is_kept_whole():
    src = _extract('''
        import torch
        FAST = True
        if FAST:
            class Model(torch.nn.Module):
                pass
        else:
            Model = None
        print("not kept")
    ''')
    assert "if FAST:" in src.code and "FAST = True" in src.code and "print" not in src.code


def test_a_library_class_is_imported_and_its_tree_rebuilt_when_it_can_be():
    """``nn.Sequential`` of torch.nn modules: imported, with ``get_init_inputs()`` (checked on the meta device);
    a module whose constructor arguments are not its attributes: imported, built with the original's arguments."""
    torch.manual_seed(0)
    seq = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.GELU(approximate="tanh"),
                              torch.nn.Flatten(), torch.nn.Linear(8 * 25, 4))
    src = class_source(seq, (((2, 3, 5, 5), torch.float32, torch.device("cpu")),))
    assert src.base == "torch.nn.Sequential" and "container.py" not in src.code and "class Sequential" not in src.code
    namespace: dict = {}
    exec(src.code, namespace)  # noqa: S102 - the saved file's own definitions
    torch.manual_seed(0)
    rebuilt = torch.nn.Sequential(*namespace["get_init_inputs"]())
    assert repr(rebuilt) == repr(seq) and all(torch.equal(a, b) for a, b in zip(rebuilt.parameters(), seq.parameters()))
    assert [tuple(t.shape) for t in namespace["get_inputs"]()] == [(2, 3, 5, 5)]
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    other = class_source(layer)
    assert other.base == "torch.nn.TransformerEncoderLayer" and "get_init_inputs" not in other.code


class MinusInfTable(torch.nn.Module):
    """A table from constants alone (a region left to torch code, written as a function in the saved file)
    holding ``-inf``: torch.fx writes it as the name ``inf``."""

    def forward(self, x):
        table = torch.arange(6.0).masked_fill(torch.arange(6) > 3, float("-inf"))
        return torch.softmax(x + torch.logcumsumexp(table, 0), dim=-1)  # logcumsumexp: not imported, apart


@pytest.mark.slow  # a fresh process compiling the saved file: 15-20 s (make test-slow, CI)
def test_a_saved_graph_that_writes_inf_runs(tmp_path):
    import axon_eg as ax

    x = torch.randn(3, 6)
    fast = ax.optimize(MinusInfTable(), (x,), k=1, saturation_s=0.3, cache_dir=str(tmp_path / "cache"))
    saved = fast.save(tmp_path / "minus_inf_new.py")
    assert "masked_fill" in saved.read_text() and any("reads no input" in (r.why_torch or "") for r in fast.report)
    spec = importlib.util.spec_from_file_location("minus_inf_new", saved)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with torch.no_grad():
        torch.testing.assert_close(mod.ModelNew()(x), MinusInfTable()(x), rtol=1e-5, atol=1e-6)
