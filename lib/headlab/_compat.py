"""Old import paths, kept working for one release with a ``DeprecationWarning``.

Release 0.2 grouped the library by meaning (``headlab.heads``, ``headlab.analysis``, ...). Code
written against 0.1 (``from headlab.sweep import sweep``) still runs: importing an old module
returns an alias of its new home, and says where that is. A name that left the module its old
path points to is listed in :data:`MOVED_NAMES`. The aliases go in headlab 0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

# old module -> new module
MOVED_MODULES: dict[str, str] = {
    "headlab.adapters": "headlab.heads.adapters",
    "headlab.edits": "headlab.heads.gate",
    "headlab.model": "headlab.heads.model",
    "headlab.loading": "headlab.heads.loading",
    "headlab.organisms": "headlab.models.gpt",
    "headlab.detect.planted": "headlab.models.planted",
    "headlab.tasks": "headlab.data.two_relations",
    "headlab.train_data": "headlab.data.spans",
    "headlab.evaluation": "headlab.metrics",  # the item metrics joined the other per-input metrics
    "headlab.sweep": "headlab.analysis.sweep",
    "headlab.importance": "headlab.analysis.importance",
    "headlab.circuits": "headlab.analysis.circuits",
    "headlab.prune": "headlab.analysis.prune",
    "headlab.adversarial": "headlab.analysis.adversarial",
    "headlab.atlas": "headlab.analysis.atlas",
    "headlab.sae": "headlab.analysis.sae.model",
    "headlab.sae_analysis": "headlab.analysis.sae.compare",
    "headlab.train": "headlab.training.loop",
    "headlab.distill": "headlab.training.distill",
    "headlab.width_depth": "headlab.training.recipes.width_depth",
    "headlab.claims": "headlab.ledger",
    "headlab.plotting": "headlab.viz.figures",
    "headlab.plotting_beyond_heads": "headlab.viz.sae",
    "headlab.widgets": "headlab.viz.widgets",
}
# old package -> new package (its submodules follow)
MOVED_PACKAGES: dict[str, str] = {
    "headlab.detect": "headlab.analysis.detect",
    "headlab.language": "headlab.data.language",
}
# old module -> {name: module that now defines it}, for names that left the module the old path aliases
MOVED_NAMES: dict[str, dict[str, str]] = {
    "headlab.model": {
        "ActivationCache": "headlab.heads.capture",
        "Resampler": "headlab.heads.gate",
    },
    "headlab.organisms": {
        name: "headlab.models.checkpoints"
        for name in ("CHECKPOINT_DIR", "CheckpointError", "Organism", "available_organisms", "load_checkpoint",
                     "load_organism", "save_checkpoint", "sha256_file", "verify_checkpoint")
    },
}
# headlab.plotting (621 lines) became one module per kind of figure; viz.figures keeps new_axes
MOVED_NAMES["headlab.plotting"] = {
    "plot_pattern": "headlab.viz.patterns",
    "plot_patterns_by_head_count": "headlab.viz.patterns",
    "plot_labelled_points": "headlab.viz.patterns",
    "plot_head_grid": "headlab.viz.grids",
    "KEEP_COLOURS": "headlab.viz.grids",
    "plot_keep_map": "headlab.viz.grids",
    "plot_runs": "headlab.viz.curves",
    "plot_phase_change": "headlab.viz.curves",
    "plot_series": "headlab.viz.curves",
    "plot_scaling": "headlab.viz.scaling",
    "plot_singular_values": "headlab.viz.scaling",
    "plot_per_input": "headlab.viz.comparisons",
    "plot_grouped_bars": "headlab.viz.comparisons",
    "plot_lorenz": "headlab.viz.importance",
    "plot_mean_vs_worst": "headlab.viz.importance",
    "plot_score_vs_effect": "headlab.viz.importance",
    "plot_pair_interactions": "headlab.viz.importance",
    "plot_pruning_curves": "headlab.viz.importance",
    "plot_composition": "headlab.viz.circuits",
    "plot_circuit_drops": "headlab.viz.circuits",
    "LABEL_COLOURS": "headlab.viz.atlas",
    "plot_atlas": "headlab.viz.atlas",
    "plot_atlases": "headlab.viz.atlas",
    "plot_lift_vs_effect": "headlab.viz.atlas",
}
MOVED_NAMES["headlab.plotting_beyond_heads"] = {"plot_width_depth": "headlab.viz.scaling"}
MOVED_NAMES["headlab.evaluation"] = {
    name: "headlab.analysis.task_shares" for name in ("TASKS", "busiest_windows", "margin_share_lost")}
MOVED_NAMES["headlab.adversarial"] = {
    name: "headlab.analysis.inspection" for name in (
        "query_rows", "peak_weight", "flag_inputs", "suspicion", "detection_rates", "weight_before",
        "rates_from_scores")}
MOVED_NAMES["headlab.atlas"] = {"add_commands": "headlab.cli"}  # every analysis command is registered there

# "module:new_name" for a name that was also renamed
# training, recipes, data tasks (one loop, one registry, tasks named by content)
MOVED_NAMES.update({
    "headlab.train": {
        "EVAL_SEED": "headlab.data.spans:SPANS_EVAL_SEED", "GPT": "headlab.models.gpt",
        "LANGUAGE_EVAL_SEED": "headlab.data.windows", "LANGUAGE_OPTIONS": "headlab.training.recipes.organisms",
        "ORGANISMS": "headlab.training.recipes:RECIPES", "Recipe": "headlab.training.recipe",
        "Task": "headlab.training.recipe", "add_commands": "headlab.training.runs", "save_run": "headlab.training.runs",
        "plot_curve": "headlab.viz.training",
        # re-exported by 0.1's headlab.train from its data module
        "RepeatedSpans": "headlab.data.spans", "SpanBatch": "headlab.data.spans",
        "SyntheticLanguage": "headlab.data.windows", "LanguageEval": "headlab.data.windows",
        "per_input_head_scores": "headlab.data.head_scores", "summarize_head_scores": "headlab.data.head_scores",
    },
    "headlab.train_data": {
        "EVAL_SEED": "headlab.data.spans:SPANS_EVAL_SEED", "GPT": "headlab.models.gpt",
        "LANGUAGE_EVAL_SEED": "headlab.data.windows", "LanguageEval": "headlab.data.windows",
        "SyntheticLanguage": "headlab.data.windows", "per_input_head_scores": "headlab.data.head_scores",
        "summarize_head_scores": "headlab.data.head_scores",
    },
    "headlab.tasks": {
        "EVAL_SEED": "headlab.data.two_relations:TWO_RELATIONS_EVAL_SEED", "LanguageWindows": "headlab.data.windows",
    },
    "headlab.distill": {
        "average_heads": "headlab.analysis.averaging", "layer_mean_pattern": "headlab.analysis.averaging",
        "layer_mean_z": "headlab.analysis.averaging", "specialists": "headlab.analysis.specialists",
    },
    "headlab.sae": {
        "SAETrainLog": "headlab.training.sae", "resample_dead": "headlab.training.sae", "train_sae": "headlab.training.sae",
    },
})

REMOVAL = "headlab 0.3"


def new_location(old: str) -> str | None:
    """Where the module once importable as ``old`` lives now (``None``: it did not move)."""
    if old in MOVED_MODULES:
        return MOVED_MODULES[old]
    for pkg in sorted(MOVED_PACKAGES, key=len, reverse=True):
        if old == pkg or old.startswith(pkg + "."):
            return MOVED_PACKAGES[pkg] + old[len(pkg):]
    return None


class _Alias(types.ModuleType):
    """The old module name: every attribute is looked up in the new module (or where it moved)."""

    def __init__(self, old: str, target: types.ModuleType):
        super().__init__(old, target.__doc__)
        self.__dict__["_target"] = target
        if hasattr(target, "__path__"):
            self.__path__ = []  # a package: its old submodules are found by the finder below

    def __getattr__(self, name: str):
        moved = MOVED_NAMES.get(self.__name__, {}).get(name)
        if moved is not None:
            module, _, new_name = moved.partition(":")
            return getattr(importlib.import_module(module), new_name or name)
        return getattr(self.__dict__["_target"], name)

    def __dir__(self):
        return sorted(set(dir(self.__dict__["_target"])) | set(MOVED_NAMES.get(self.__name__, {})))


class _OldPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("headlab.") or new_location(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = new_location(spec.name)
        warnings.warn(f"{spec.name} moved to {new}: import from there ({spec.name} goes in {REMOVAL})",
                      DeprecationWarning, stacklevel=2)
        return _Alias(spec.name, importlib.import_module(new))

    def exec_module(self, module):
        pass


_FINDER = _OldPathFinder()


def install() -> None:
    """Put the old-path finder on ``sys.meta_path`` (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
