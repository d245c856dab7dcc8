"""Links from docstrings to the API reference page: a Sphinx extension of the book.

``chapters/reference/api.md`` documents objects where a reader imports them
(``headlab.load``, ``headlab.heads.HeadModel``); docstrings name them from where they
are defined (``:func:`load``` inside ``headlab.heads.loading``). Both paths designate one
Python object, so a reference that Sphinx cannot resolve by name is resolved by identity
to where the page documents it. Listed in ``sphinx.local_extensions`` of ``_config.yml``.
"""

from __future__ import annotations


def _import_path(path: str):
    """The Python object at a dotted path (``headlab.heads.HeadModel.ablate``), or ``None``."""
    import importlib

    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:  # noqa: BLE001 (not a module: try a shorter prefix)
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


_DOCUMENTED: dict[tuple[int, int], dict[int, str]] = {}


def _documented_by_identity(env) -> dict[int, str]:  # noqa: ANN001
    """id(object) -> the name the API page documents it under (functions, classes, methods,
    properties and modules only: equal constants would share an id)."""
    import inspect

    objects = env.get_domain("py").objects
    key = (id(env), len(objects))  # ids are only valid in this process: never stored in the env
    if key not in _DOCUMENTED:
        found: dict[int, str] = {}
        for name in objects:
            obj = _import_path(name) if _in_headlab(name) else None
            if inspect.isroutine(obj) or inspect.isclass(obj) or inspect.ismodule(obj) or isinstance(obj, property):
                found.setdefault(id(obj), name)
        _DOCUMENTED.clear()
        _DOCUMENTED[key] = found
    return _DOCUMENTED[key]


def _resolve_reexported(app, env, node, contnode):  # noqa: ANN001, ANN201
    """Resolve a reference to a headlab object by a path other than the one the API page uses.

    The API page documents objects where a reader imports them (``headlab.load``,
    ``headlab.heads.HeadModel``), while docstrings name them from where they are defined
    (``:func:`load``` in ``headlab.heads.loading``). Both designate one Python object: find
    it from the reference's module and class, and link to where it is documented. Failing
    that (e.g. in an autosummary table's summary lines, which have no module), a name that
    exactly one documented object ends with links to it. Anything else stays unresolved, so
    ``-n`` still reports a broken reference.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip(".~")
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [f"{module}.{cls}.{target}"] if module and cls else []
    candidates += [f"{module}.{target}"] if module else []
    candidates.append(target)
    documented = _documented_by_identity(env)
    names = [documented.get(id(obj)) for obj in map(_import_path, filter(_in_headlab, candidates))
             if obj is not None]
    names = [n for n in names if n is not None]
    if not names:  # the one documented object of that name, if there is exactly one
        names = [n for n in documented.values() if n.endswith("." + target)]
        names = names if len(names) == 1 else []
    if not names:
        return None
    return env.get_domain("py").resolve_xref(env, node["refdoc"], app.builder, "obj", names[0], node, contnode)


def _in_headlab(path: str) -> bool:
    return path == "headlab" or path.startswith("headlab.")


def _quiet_argparse_any_xref() -> None:
    """sphinx-argparse's ``commands`` domain warns "no command xref target" on every MyST link
    (``[term](gl-residual-stream)``: an ``any`` reference offered to every domain) that is not a
    command, although the standard domain resolves it. Only its own roles may warn."""
    try:
        from sphinxarg.ext import ArgParseDomain
    except ImportError:  # the API page's CLI section needs it; nothing to quiet without it
        return
    if getattr(ArgParseDomain, "_headlab_quiet", False):
        return

    def resolve_any_xref(self, env, fromdocname, builder, target, node, contnode):  # noqa: ANN001, ANN202
        anchor = target.lower()
        for _cmd, _sig, _type, docname, anchor_id, _prio in self.get_objects():
            if anchor_id == anchor:
                from sphinx.util.nodes import make_refnode
                return [("commands:command", make_refnode(builder, fromdocname, docname, anchor_id, contnode,
                                                          anchor_id))]
        return []

    ArgParseDomain.resolve_any_xref = resolve_any_xref
    ArgParseDomain._headlab_quiet = True


def setup(app):  # noqa: ANN001, ANN201
    """Sphinx entry point."""
    _quiet_argparse_any_xref()
    app.connect("missing-reference", _resolve_reexported)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
