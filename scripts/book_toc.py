"""The pages of the book, in the order of ``_toc.yml``: one reader for the scripts that need them
(the Colab edition, the glossary's pointers, the prose budget)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["toc_files"]


def toc_files(numbered_only: bool = False, root: Path = ROOT) -> list[str]:
    """The docnames of ``_toc.yml``: the root, then every ``file:`` entry (a chapter's sections after
    it), in order. With ``numbered_only``, only the entries of the parts marked ``numbered: true``."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    files: list[str] = [] if numbered_only else [str(toc["root"])]

    def walk(node) -> None:  # noqa: ANN001
        if isinstance(node, dict):
            if "file" in node:
                files.append(str(node["file"]))
            for key, value in node.items():
                if key != "root":
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk([p for p in toc.get("parts", []) if p.get("numbered")] if numbered_only else
         {k: v for k, v in toc.items() if k != "root"})
    return files
