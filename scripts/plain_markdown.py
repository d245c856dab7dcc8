"""MyST Markdown to plain Markdown, for the notebooks people open outside the website.

The chapters are written in MyST (directives such as ```` ```{admonition} ````, roles such as
``{doc}`...` ``, targets such as ``(label)=``), which only the website renders: Colab,
JupyterLab and GitHub show it as raw text. :func:`plain_markdown` rewrites one markdown cell so
that it reads right everywhere:

- admonitions (``admonition``, ``note``, ``tip``, ``warning``, ...) become block quotes with a
  bold title, or ``<details>`` when they carry ``:class: dropdown``;
- ``literalinclude`` becomes a code block holding the included code (``:pyobject:``,
  ``:lines:``, ``:start-after:``/``:end-before:``), with a link to the file at the pinned commit;
- ``code-block``/``code`` become fenced code, ``math`` becomes ``$$ ... $$``, ``figure``/``image``
  become images (relative paths point at the repository's raw files at the pinned commit);
- the exercise markers become a heading (``exercise-start``), a one-line note
  (``solution-start``) or nothing (``exercise-end``, ``solution-end``);
- roles become text or links to the website: ``{doc}`` and ``{ref}`` link to the page (and
  anchor) they name, ``{term}`` to the glossary, ``{math}`` becomes ``$...$``, code roles
  (``{func}``, ``{class}``, ...) become inline code;
- ``{glue:text}`` values become the text the website shows (the value stored in the notebook's
  outputs, formatted by myst-nb's own rule): a name with no stored value is an error;
- Markdown links to the book (a label such as ``gl-induction-head``, ``#anchor``, ``page.md``,
  ``../05_x/05_x.ipynb#anchor``) point to the website's page, links to other files of the
  repository to the file at the pinned commit, and relative images to the raw file;
- ``(label)=`` targets and ``%`` comment lines are removed.

Anything else written as a directive becomes a block quote titled with its name, so no raw
directive syntax survives (``tests/test_colab_edition.py`` scans every generated notebook).
Code blocks are copied untouched.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

__all__ = ["Links", "plain_markdown", "glued_values", "RAW_SYNTAX", "raw_syntax"]

DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})\{(?P<name>[^}\s]+)\}[ \t]*(?P<arg>.*?)[ \t]*$")
CODE_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
TARGET = re.compile(r"^[ \t]*\((?P<label>[^()\s]+)\)=[ \t]*$")
ROLE = re.compile(r"(?<![`\w])\{(?P<name>[A-Za-z][\w:+-]*)\}`(?P<text>[^`]*)`")
OPTION = re.compile(r"^:(?P<key>[\w-]+):[ \t]*(?P<value>.*?)[ \t]*$")
MD_LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^()\s]+)\)")
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.I)
TEXT_AND_TARGET = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)
# What must never reach a notebook opened outside the site (the scan of the generated notebooks).
RAW_SYNTAX = {
    "directive": re.compile(r"^[ \t]*(?:`{3,}|~{3,}|:{3,})\{[^}\s]+\}", re.M),
    "directive option": re.compile(r"^:(?:label|class|pyobject|language|name|lines|caption|dedent):", re.M),
    "role": ROLE,
    "target": re.compile(r"^[ \t]*\([^()\s]+\)=[ \t]*$", re.M),
}

ADMONITIONS = {"admonition", "note", "tip", "hint", "important", "warning", "caution", "attention", "danger",
               "error", "seealso", "topic", "sidebar", "margin", "epigraph", "versionadded", "versionchanged",
               "deprecated"}
CODE_DIRECTIVES = {"code-block", "code", "sourcecode", "code-cell"}
CODE_ROLES = {"func", "class", "meth", "mod", "attr", "obj", "data", "exc", "any", "const", "type", "kbd",
              "guilabel", "command", "file", "samp", "code", "literal", "envvar", "program", "option"}
DROPPED = {"exercise-end", "solution-end", "toctree", "tableofcontents", "bibliography"}


@dataclass
class Links:
    """Where a notebook's links point: the website, the repository at the pinned commit, and the
    labels and page titles of the book (for ``{ref}``, ``{doc}`` and ``{term}``)."""

    notebook: PurePosixPath  # the notebook's path in the repository, e.g. chapters/00_x/x.ipynb
    root: Path  # the repository (literalinclude reads files from it)
    site_url: str  # the website, ending in "/"
    repo_url: str  # https://github.com/owner/name
    commit: str
    labels: dict[str, tuple[str, str]] = field(default_factory=dict)  # label -> (docname, anchor)
    titles: dict[str, str] = field(default_factory=dict)  # docname -> page title
    glossary: str | None = None  # the glossary's docname
    glue: dict[str, str] | None = None  # glued name -> its stored text/plain (None: the notebook was not read)

    @property
    def docname(self) -> str:
        return str(self.notebook.with_suffix(""))

    def page(self, docname: str, anchor: str = "") -> str:
        return f"{self.site_url}{docname}.html" + (f"#{anchor}" if anchor else "")

    def raw(self, path: PurePosixPath) -> str:
        owner_name = self.repo_url.rstrip("/").split("github.com/")[-1]
        return f"https://raw.githubusercontent.com/{owner_name}/{self.commit}/{path}"

    def blob(self, path: PurePosixPath) -> str:
        return f"{self.repo_url.rstrip('/')}/blob/{self.commit}/{path}"

    def resolve(self, relative: str) -> PurePosixPath:
        """A path written in the notebook (relative to its folder, or from the root with ``/``)."""
        base = PurePosixPath() if relative.startswith("/") else self.notebook.parent
        parts: list[str] = []
        for part in (base / relative.lstrip("/")).parts:
            if part == "..":
                if not parts:
                    raise ValueError(f"{self.notebook}: {relative!r} points outside the repository")
                parts.pop()
            elif part != ".":
                parts.append(part)
        return PurePosixPath(*parts)


def raw_syntax(text: str) -> list[str]:
    """The MyST constructs left in ``text`` outside code blocks, as ``"kind: the line"``."""
    found = []
    for line_text in _prose(text):
        for kind, pattern in RAW_SYNTAX.items():
            if pattern.search(line_text):
                found.append(f"{kind}: {line_text.strip()[:120]}")
    return found


def _prose(text: str) -> list[str]:
    """The lines of ``text`` that are not inside a plain fenced code block."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        m = CODE_FENCE.match(lines[i])
        if m and not DIRECTIVE.match(lines[i]):
            _, i = _take_block(lines, i + 1, m["fence"])
            continue
        out.append(lines[i])
        i += 1
    return out


def _take_block(lines: list[str], start: int, fence: str) -> tuple[list[str], int]:
    """The lines of a fenced block from ``start`` to its closing fence, and the index after it."""
    char = fence[0]
    for j in range(start, len(lines)):
        stripped = lines[j].strip()
        if len(stripped) >= len(fence) and set(stripped) == {char}:
            return lines[start:j], j + 1
    return lines[start:], len(lines)  # unclosed: to the end, as MyST does


def _options(body: list[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    i = 0
    if body and body[0].strip() == "---":  # a YAML block of options
        end = next((j for j in range(1, len(body)) if body[j].strip() == "---"), None)
        if end is not None:
            for line in body[1:end]:
                key, _, value = line.partition(":")
                options[key.strip()] = value.strip()
            i = end + 1
    while i < len(body) and (m := OPTION.match(body[i].strip())):
        options[m["key"]] = m["value"]
        i += 1
    content = body[i:]
    while content and not content[0].strip():
        content = content[1:]
    return options, content


def plain_markdown(text: str, links: Links, *, solution_note: str = "") -> str:
    """``text`` (one markdown cell in MyST) in plain Markdown; see the module docstring.

    ``solution_note`` replaces a ``solution-start`` marker (empty: the marker leaves nothing).
    """
    return "\n".join(_convert(text.splitlines(), links, solution_note)).strip("\n")


def _convert(lines: list[str], links: Links, solution_note: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := DIRECTIVE.match(line):
            body, i = _take_block(lines, i + 1, m["fence"])
            block = _directive(m["name"], m["arg"], [b[len(m["indent"]):] for b in body], links, solution_note)
            out += [m["indent"] + b if b else b for b in block]
            continue
        if m := CODE_FENCE.match(line):
            body, i = _take_block(lines, i + 1, m["fence"])
            out += [line, *body, m["indent"] + m["fence"]]
            continue
        i += 1
        if TARGET.match(line) or re.match(r"^%(?:\s|$)", line):
            continue
        line = ROLE.sub(lambda r: _role(r["name"], r["text"], links), line)
        out.append(MD_LINK.sub(lambda m: _link(m, links), line))
    return out


def _link(m: re.Match, links: Links) -> str:
    """A Markdown link or image with its target rewritten to work outside the site."""
    target = m["target"]
    if EXTERNAL.match(target):
        return m[0]
    path, _, anchor = target.partition("#")
    if m["bang"]:
        url = links.raw(links.resolve(path))
    elif not path:  # "#anchor": a label of the book, or a heading of this page
        url = links.page(*links.labels[anchor]) if anchor in links.labels else links.page(links.docname, anchor)
    elif path in links.labels and not anchor:
        url = links.page(*links.labels[path])
    elif path.endswith((".md", ".ipynb")):
        url = links.page(str(links.resolve(path).with_suffix("")), anchor)
    else:
        url = links.blob(links.resolve(path)) + (f"#{anchor}" if anchor else "")
    return f"{m['bang']}[{m['text']}]({url})"



def _directive(name: str, arg: str, body: list[str], links: Links, solution_note: str) -> list[str]:
    options, content = _options(body)
    inner = _convert(content, links, solution_note) if name not in CODE_DIRECTIVES | {"math", "raw"} else content
    arg = ROLE.sub(lambda r: _role(r["name"], r["text"], links), arg)
    if name in DROPPED:
        return []
    if name in ("exercise-start", "exercise"):
        label = f" (`{options['label']}`)" if options.get("label") else ""
        return [f"### Exercise: {arg}{label}", "", *inner]
    if name in ("solution-start", "solution"):
        return ([solution_note] if solution_note else []) + inner
    if name in ADMONITIONS or name == "dropdown":
        title = arg or name.capitalize()
        if name == "dropdown" or "dropdown" in options.get("class", "").split():
            return ["<details>", f"<summary><b>{title}</b></summary>", "", *inner, "", "</details>"]
        return [f"> **{title}**", ">", *(f"> {x}" if x.strip() else ">" for x in inner)]
    if name == "literalinclude":
        return _literalinclude(arg, options, links)
    if name in CODE_DIRECTIVES:
        return [f"```{arg}", *content, "```"]
    if name == "math":
        return ["$$", *content, "$$"]
    if name in ("figure", "image"):
        url = arg if re.match(r"^[a-z]+://", arg) else links.raw(links.resolve(arg))
        caption = [f"*{' '.join(x.strip() for x in inner if x.strip())}*"] if inner and name == "figure" else []
        return [f"![{options.get('alt', '')}]({url})", *([""] + caption if caption else [])]
    if name == "raw":
        return content if arg.strip() == "html" else []
    if name == "glossary":
        return inner
    if name == "table":
        # a captioned Markdown table: the caption in bold above it, the table as it is
        return ([f"**{arg}**", ""] if arg else []) + inner
    return [f"> **{name}{': ' + arg if arg else ''}**", ">", *(f"> {x}" if x.strip() else ">" for x in inner)]


def _literalinclude(arg: str, options: dict[str, str], links: Links) -> list[str]:
    path = links.resolve(arg)
    file = links.root / path
    if not file.is_file():
        raise ValueError(f"{links.notebook}: literalinclude of {arg!r}: no file {file}")
    text = file.read_text(encoding="utf-8")
    what = ""
    if obj := options.get("pyobject"):
        text, what = _pyobject(text, obj, file), f", `{obj}`"
    if after := options.get("start-after"):
        text = text.split(after, 1)[1].split("\n", 1)[-1] if after in text else text
    if before := options.get("end-before"):
        text = text.split(before, 1)[0].rsplit("\n", 1)[0] if before in text else text
    if spec := options.get("lines"):
        all_lines, picked = text.splitlines(), []
        for part in spec.split(","):
            lo, _, hi = part.strip().partition("-")
            picked += all_lines[int(lo) - 1: int(hi) if hi else int(lo)]
        text = "\n".join(picked)
    if "dedent" in options:
        text = textwrap.dedent(text)
    language = options.get("language") or ("python" if path.suffix == ".py" else "")
    shown = str(path)[4:] if str(path).startswith("lib/") else str(path)
    return [f"From [`{shown}`]({links.blob(path)}){what}:", "", f"```{language}", *text.rstrip("\n").splitlines(),
            "```"]


def _pyobject(text: str, name: str, file: Path) -> str:
    """The source of a function or class (``Class.method`` too), decorators included."""
    tree = ast.parse(text)
    scope, node = tree.body, None
    for part in name.split("."):
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            raise ValueError(f"literalinclude: {file} defines no {name!r}")
        scope = node.body
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return textwrap.dedent("\n".join(text.splitlines()[start - 1: node.end_lineno]))


def _role(name: str, text: str, links: Links) -> str:
    name = name.split(":")[-1] if name.startswith(("py:", "std:")) else name
    m = TEXT_AND_TARGET.match(text)
    shown, target = (m["text"], m["target"]) if m else (None, text)
    if name == "doc":
        docname = str(links.resolve(target)).removesuffix(".ipynb").removesuffix(".md")
        return f"[{shown or links.titles.get(docname, docname)}]({links.page(docname)})"
    if name in ("ref", "numref"):
        if target in links.labels:
            docname, anchor = links.labels[target]
            return f"[{shown or links.titles.get(docname, target)}]({links.page(docname, anchor)})"
        return shown or target
    if name == "term":
        word = shown or target
        if links.glossary:
            return f"[{word}]({links.page(links.glossary, 'term-' + _slug(target))})"
        return word
    if name in ("glue", "glue:", "glue:text", "glue:any"):
        return _glue(text, links)
    if name == "math":
        return f"${text}$"
    if name == "eq":
        return f"({target})"
    if name in ("sub", "sup"):
        return f"<{name}>{text}</{name}>"
    if name == "abbr":
        return re.sub(r"\s*\([^)]*\)$", "", text)
    if name == "download":
        return f"[{shown or target}]({links.raw(links.resolve(target))})"
    if name in ("cite", "footcite", "cite:p", "cite:t"):
        return f"[{text}]"
    if name in CODE_ROLES:
        shown = shown or (target.lstrip("~.").rsplit(".", 1)[-1] if target.startswith("~") else target.lstrip("."))
        return f"`{shown}`"
    return shown or target


def _glue(text: str, links: Links) -> str:
    """What the website shows for ``{glue:text}`name:format```: myst-nb's own formatting of the value
    stored in the notebook (so the two editions cannot differ)."""
    from myst_nb.core.variables import format_plain_text

    key, _, fmt = text.partition(":")
    if links.glue is None:
        return text  # a notebook read without its outputs: the name stands in
    if key not in links.glue:
        raise ValueError(f"{links.notebook}: {{glue:text}}`{text}` names no value stored in the notebook's outputs; "
                         "re-execute it (scripts/execute_notebooks.py) or correct the name")
    return format_plain_text(links.glue[key], fmt)


def glued_values(nb) -> dict[str, str]:
    """name -> text/plain of every value a notebook glued (myst-nb's ``glue``), from its stored outputs."""
    values = {}
    for cell in nb["cells"]:
        for output in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            scrap = output.get("metadata", {}).get("scrapbook")
            if scrap:
                data = output.get("data", {})
                text = data.get(scrap.get("mime_prefix", "") + "text/plain", data.get("text/plain"))
                if text is not None:
                    values[scrap["name"]] = "".join(text) if isinstance(text, list) else text
    return values


def _slug(text: str) -> str:
    """Sphinx's anchor for a name: lower case, runs of other characters as one hyphen."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
