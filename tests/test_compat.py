"""Import paths of headlab 0.1 keep working for one release, and say where the name lives now."""

import importlib
import sys

import pytest

from headlab import _compat


@pytest.mark.parametrize("old", sorted(_compat.MOVED_MODULES) + sorted(_compat.MOVED_PACKAGES))
def test_old_module_path_warns_and_aliases_the_new_module(old):
    new = _compat.new_location(old)
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        alias = importlib.import_module(old)
    target = importlib.import_module(new)
    public = [n for n in getattr(target, "__all__", dir(target)) if not n.startswith("_")]
    assert public, f"{new} exports nothing"
    for name in public:
        assert getattr(alias, name) is getattr(target, name)


def test_old_submodule_of_a_moved_package():
    sys.modules.pop("headlab.language.grammar", None)
    with pytest.warns(DeprecationWarning, match=r"headlab\.data\.language\.grammar"):
        from headlab.language.grammar import Language
    from headlab.data.language.grammar import Language as New
    assert Language is New


def test_new_paths_do_not_warn(recwarn):
    import headlab.analysis.sweep  # noqa: F401
    import headlab.heads.model  # noqa: F401
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning) and "moved to" in str(w.message)]


def test_an_unknown_old_name_is_not_invented():
    assert _compat.new_location("headlab.nothing_here") is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("headlab.nothing_here")


def test_every_public_name_of_0_1_still_resolves_through_its_old_path():
    """A name that moves again must be listed in _compat.MOVED_NAMES, or old user code breaks."""
    import json
    import pathlib
    import warnings

    names = json.loads((pathlib.Path(__file__).parent / "data" / "public_names_0.1.json").read_text())
    missing = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for old, public in names.items():
            module = importlib.import_module(old)
            missing += [f"{old}.{n}" for n in public if not hasattr(module, n)]
    assert not missing, f"0.1 names no longer importable from their old path: {missing}"
