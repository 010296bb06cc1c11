"""MkDocs hooks: the pages' generated parts, from the code itself at build time.

- ``<!-- fedsim:reference -->``: the scenario reference, every section and key of the schema
  (``fedsim.config.reference``), so a setting is documented by its ``description``;
- ``<!-- fedsim:algorithms -->``: one line per algorithm of the registry ``fedsim algorithms``
  lists (``ALGORITHM_NAMES``), linked to its page;
- ``<!-- fedsim:algorithm-options NAME... -->``: each named algorithm's heading, docstring and
  options (its section of the reference but the keys every algorithm has).

Files outside docs/ that pages show (``EXTERNAL_FILES``) go into the site from where they live,
with no copy in docs/. The build documents this checkout's code, not an installed copy.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's fedsim, before any installed one

from mkdocs.structure.files import File, Files  # noqa: E402

from fedsim.config import Scenario  # noqa: E402
from fedsim.config.algorithms import ALGORITHM_NAMES, algorithm_model  # noqa: E402
from fedsim.config.reference import Key, Reference, Section  # noqa: E402

REFERENCE_PAGE = "scenarios/reference.md"
MARKER = re.compile(r"<!-- fedsim:([a-z-]+)((?: [a-z_0-9]+)*) -->")
# (where it lives in the repository, where the site serves it)
EXTERNAL_FILES = (("scenarios/figures/subband_gain.png", "assets/figures/subband_gain.png"),)
COMMON_ALGORITHM_KEYS = ("name", "label", "compression")  # on every algorithm: said once

_reference = Reference.of(Scenario)
_algorithm_pages: dict[str, str] = {}  # algorithm name -> the page that documents its options


def on_files(files: Files, config: Any) -> Files:
    for source, served in EXTERNAL_FILES:
        files.append(File.generated(config, served, abs_src_path=str(ROOT / source)))
    return files


def on_nav(nav: Any, config: Any, files: Files) -> Any:
    """Which page documents each algorithm's options, read before any page is rendered."""
    _algorithm_pages.clear()  # mkdocs serve builds again in the same process
    for file in files.documentation_pages():
        for match in MARKER.finditer(Path(file.abs_src_path).read_text()):
            if match.group(1) == "algorithm-options":
                for name in match.group(2).split():
                    _algorithm_pages[name] = file.src_uri
    return nav


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return MARKER.sub(lambda match: _expand(match, page.file.src_uri), markdown)


def _expand(match: re.Match[str], page: str) -> str:
    kind, names = match.group(1), match.group(2).split()
    if kind == "reference":
        return reference_markdown()
    if kind == "algorithms":
        return algorithms_markdown(page)
    if kind == "algorithm-options":
        return "\n\n".join(algorithm_options_markdown(name, page) for name in names)
    raise ValueError(f"{page}: unknown marker fedsim:{kind}")


# --- the reference ----------------------------------------------------------------------------


def reference_markdown() -> str:
    parts = []
    for section in _reference.sections:
        depth = min(2 + section.path.count("."), 4) if section.path else 2
        parts.append(f"{'#' * depth} {section.title} {{#{section.anchor}}}")
        parts.append(_section_body(section))
    return "\n\n".join(parts)


def _section_body(section: Section, link_to: str = "") -> str:
    lines = []
    if section.doc:
        lines.append(section.doc)
    if section.shared:
        lines.append("At " + ", ".join(f"`{path}`" for path in section.paths) + ".")
    keys = [key for key in section.keys if not key.is_tag]
    if keys:
        lines.append(_table(keys, link_to))
    elif section.tag:
        lines.append(f"No keys but `{section.tag[0]}: {section.tag[1]}`.")
    return "\n\n".join(lines)


def _table(keys: list[Key], link_to: str) -> str:
    rows = ["| key | type | default | unit | allowed | description |", "|---|---|---|---|---|---|"]
    for key in keys:
        kind = key.type.replace("](#", f"]({link_to}#") if link_to else key.type
        cells = (
            f"`{key.name}`",
            kind,
            f"`{key.default}`"
            if key.default not in ("required", "its keys' defaults")
            else key.default,
            key.unit,
            key.allowed,
            key.description,
        )
        rows.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    """A table cell: pipes outside code spans escaped (the tables extension leaves those inside
    alone), on one line."""
    parts = text.replace("\n", " ").split("`")
    return "`".join(part if i % 2 else part.replace("|", "\\|") for i, part in enumerate(parts))


# --- algorithms -------------------------------------------------------------------------------


def _relative(target: str, page: str) -> str:
    """The link from one page to another (both docs/-relative .md paths)."""
    up = "../" * page.count("/")
    return f"{up}{target}"


def algorithms_markdown(page: str) -> str:
    rows = ["| algorithm | what it is | options |", "|---|---|---|"]
    for name in ALGORITHM_NAMES:
        section = _reference.section(algorithm_model(name).__name__)
        where = _algorithm_pages.get(name)
        if where is None:
            raise ValueError(f"algorithm {name} has no options table on any page")
        summary = (algorithm_model(name).__doc__ or "").strip().split("\n\n")[0]
        cells = (
            f"[`{name}`]({_relative(where, page)}#{name})",
            _cell(" ".join(summary.split())),
            f"[reference]({_relative(REFERENCE_PAGE, page)}#{section.anchor})",
        )
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def algorithm_options_markdown(name: str, page: str) -> str:
    if name not in ALGORITHM_NAMES:
        raise ValueError(f"{page}: no algorithm {name!r} in the registry")
    section = _reference.section(algorithm_model(name).__name__)
    keys = [key for key in section.keys if key.name not in COMMON_ALGORITHM_KEYS]
    heading = f"### `{name}` {{#{name}}}"
    body = [section.doc]
    body.append(_table(keys, _relative(REFERENCE_PAGE, page)) if keys else "No options of its own.")
    return "\n\n".join([heading, *body])
