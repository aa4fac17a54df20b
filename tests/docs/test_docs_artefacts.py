"""What a reader should never see on the site: a code fence left open (the rest
of the page shows as code, or its code as prose), noise on standard error or a
warning in an executed notebook, a sidebar title other than the one mkdocs.yml
gives, a link to the writer's own machine (localhost), and a repository path
written as code where the site has a page for it (a link would take the reader
there). Each check is a function over text, shown firing on a planted defect."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
WARNING = re.compile(r"\b[A-Z]\w*Warning\b|\bwarnings\.warn\b|IProgress not found")
LOCALHOST = re.compile(r"""href=["']https?://(?:localhost|127\.0\.0\.1|0\.0\.0\.0)\b""")
CODE_SPAN = re.compile(r"(?<!\[)`([^`\n]+)`(?!\])")


def open_fence(text: str) -> int | None:
    """The line (from 1) of a code fence that is never closed, or None. A fence closes
    with the same character, at least as many of it, and nothing after."""
    opened = None
    for number, line in enumerate(text.splitlines(), 1):
        found = FENCE.match(line)
        if not found:
            continue
        marks, rest = found.groups()
        if opened is None:
            opened = (number, marks)
        elif marks[0] == opened[1][0] and len(marks) >= len(opened[1]) and not rest.strip():
            opened = None
    return opened[0] if opened else None


def markdown_files() -> list[Path]:
    return sorted([*(ROOT / "docs").rglob("*.md"), *(ROOT / "spec").glob("*.md"), ROOT / "README.md",
                   *ROOT.glob("CONTRIBUTING.md")])


def notebook_markdown() -> dict[str, list[str]]:
    """The Markdown cells of every notebook the site shows: the tutorials' sources and
    the committed real-pair notebooks."""
    import jupytext
    import nbformat

    cells = {}
    for source in sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py")):
        cells[source.name] = [c.source for c in jupytext.read(source).cells if c.cell_type == "markdown"]
    for notebook in sorted((ROOT / "docs" / "real-pair").glob("*.ipynb")):
        cells[notebook.name] = [c.source for c in nbformat.read(notebook, as_version=4).cells
                                if c.cell_type == "markdown"]
    return cells


def test_an_open_fence_is_found():
    assert open_fence("text\n```python\nx = 1\n```\nmore\n") is None
    assert open_fence("a\n````\n```python\n```\n````\n") is None  # a longer fence holds a shorter one
    assert open_fence("## §7.9\n\n```python\ndef f():\n    pass\n") == 3  # the defect spec §7 had
    assert open_fence("```\ncode\n```python\n") == 1  # a closing fence takes no info string


def test_no_markdown_file_or_notebook_cell_leaves_a_fence_open():
    found = [f"{p.relative_to(ROOT)}:{line}" for p in markdown_files()
             if (line := open_fence(p.read_text())) is not None]
    found += [f"{name}, Markdown cell {n}:{line}" for name, cells in notebook_markdown().items()
              for n, cell in enumerate(cells, 1) if (line := open_fence(cell)) is not None]
    assert found == []


def noise(notebook) -> list[str]:
    """Standard error output and warnings in an executed notebook's cells."""
    found = []
    for n, cell in enumerate(notebook.cells, 1):
        for output in cell.get("outputs", []):
            text = output.get("text", "") if output.get("output_type") == "stream" else \
                "".join(output.get("data", {}).get("text/plain", ""))
            if output.get("name") == "stderr" or output.get("output_type") == "error" or WARNING.search(text):
                found.append(f"cell {n}: {text.strip()[:160]}")
    return found


def test_noise_is_found_in_a_planted_notebook():
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="4/4 exact\n")])]
    assert noise(notebook) == []
    notebook.cells.append(nbformat.v4.new_code_cell("y", outputs=[
        nbformat.v4.new_output("stream", name="stderr", text="tqdm/auto.py:21: TqdmWarning: IProgress not found\n")]))
    notebook.cells.append(nbformat.v4.new_code_cell("z", outputs=[nbformat.v4.new_output(
        "stream", name="stdout", text="model.py:3: FutureWarning: `x` is deprecated\n")]))
    assert [line.split(":")[0] for line in noise(notebook)] == ["cell 2", "cell 3"]


@pytest.fixture(scope="module")
def executed() -> dict:
    """The executed tutorials (docsbuild/harness.py, shared with the docs build and
    test_tutorials.py) and the committed real-pair notebooks."""
    import importlib.util

    import nbformat

    spec = importlib.util.spec_from_file_location("tutorial_harness", ROOT / "docsbuild" / "harness.py")
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    harness.ensure_executed()
    paths = [*sorted(harness.OUT.glob("*.ipynb")), *sorted((ROOT / "docs" / "real-pair").glob("*.ipynb"))]
    return {str(p.relative_to(ROOT)): nbformat.read(p, as_version=4) for p in paths}


def test_executed_notebooks_print_nothing_on_stderr_and_no_warning(executed):
    assert len(executed) >= 11
    assert {name: found for name, notebook in executed.items() if (found := noise(notebook))} == {}


def nav_titles(nav) -> list[tuple[str, str]]:
    """(title, page) for every page that mkdocs.yml names explicitly."""
    found = []
    for item in nav:
        if isinstance(item, dict):
            for title, value in item.items():
                found += nav_titles(value) if isinstance(value, list) else [(title, value)]
    return found


def page_html(site: Path, page: str) -> Path:
    """The built file of a page (``use_directory_urls``: ``a/b.md`` is ``a/b/index.html``)."""
    folder, _, name = re.sub(r"\.(md|ipynb)$", "", page).rpartition("/")
    return site / folder / ("index.html" if name in ("index", "README") else f"{name}/index.html")


def wrong_titles(site: Path, nav) -> list[str]:
    """Pages whose title (the sidebar's and the browser's) is not the one the nav gives."""
    wrong = []
    for title, page in nav_titles(nav):
        if page == "index.md":  # the home page's browser title is the site's name alone (Material)
            continue
        shown = re.search(r"<title>(.*?) - [^<]*</title>", page_html(site, page).read_text())
        if shown is None or html.unescape(shown.group(1)) != title:
            wrong.append(f"{page}: nav {title!r}, shown {shown and html.unescape(shown.group(1))!r}")
    return wrong


def mkdocs_nav() -> list:
    import yaml

    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]


def test_a_title_other_than_the_navs_is_found(tmp_path):
    (tmp_path / "real-pair" / "07").mkdir(parents=True)
    (tmp_path / "real-pair" / "07" / "index.html").write_text("<title>7. Real pairs and GPUs - batchspec</title>")
    nav = [{"On a real pair": [{"Chapter 7 on Qwen2.5-Coder": "real-pair/07.ipynb"}]}]
    assert wrong_titles(tmp_path, nav) == ["real-pair/07.ipynb: nav 'Chapter 7 on Qwen2.5-Coder', "
                                           "shown '7. Real pairs and GPUs'"]
    (tmp_path / "real-pair" / "07" / "index.html").write_text("<title>Chapter 7 on Qwen2.5-Coder - batchspec</title>")
    assert wrong_titles(tmp_path, nav) == []


def test_every_page_shows_the_title_mkdocs_yml_gives_it(docs_site):
    nav = mkdocs_nav()
    assert len(nav_titles(nav)) >= 12  # the tutorials and the real-pair pages are named there
    assert wrong_titles(docs_site, nav) == []


def localhost_links(site: Path) -> list[str]:
    return [f"{p.relative_to(site)}: {m.group(0)}" for p in sorted(site.rglob("*.html"))
            for m in LOCALHOST.finditer(p.read_text())]


def test_a_localhost_link_is_found(tmp_path):
    (tmp_path / "index.html").write_text('<p>then open <a href="http://127.0.0.1:8000/">the site</a></p>')
    (tmp_path / "ok.html").write_text("<p><code>mkdocs serve</code> serves it at <code>http://127.0.0.1:8000/</code></p>")
    assert localhost_links(tmp_path) == ['index.html: href="http://127.0.0.1']


def test_no_page_links_to_localhost(docs_site):
    assert localhost_links(docs_site) == []


def page_for(path: str) -> str | None:
    """The site page that a repository path written in a page stands for, if any."""
    path = path.strip().removeprefix("./")
    candidates = {"docs/": "docs/index.md", "spec/": "spec/README.md"}
    if path in candidates:
        return candidates[path]
    for top in ("docs/", "spec/"):
        if path.startswith(top) and "*" not in path:
            target = ROOT / path / "index.md" if path.endswith("/") else ROOT / path
            if target.suffix in (".md", ".ipynb") and target.is_file():
                return str(target.relative_to(ROOT))
    return None


def paths_as_code(text: str) -> list[str]:
    """Repository paths written as code (not as a link's text) that the site has a page for."""
    prose = re.sub(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1\s*$", "", text, flags=re.S | re.M)  # fenced blocks
    return [span for span in CODE_SPAN.findall(prose) if page_for(span)]


def test_a_path_written_as_code_is_found():
    text = ("See `docs/faq.md` and `spec/03-invariants.md`, or [`docs/quickstart.md`](docs/quickstart.md);\n"
            "`docs/tutorials/*.ipynb` is a glob and `tests/api_cli/test_cli.py` has no page.\n"
            "```bash\ncat docs/faq.md `docs/errors.md`\n```\n")
    assert paths_as_code(text) == ["docs/faq.md", "spec/03-invariants.md"]


def test_no_page_writes_as_code_a_path_the_site_has_a_page_for():
    found = {str(p.relative_to(ROOT)): spans for p in markdown_files() if (spans := paths_as_code(p.read_text()))}
    found |= {f"{name}, cell {n}": spans for name, cells in notebook_markdown().items()
              for n, cell in enumerate(cells, 1) if (spans := paths_as_code(cell))}
    assert found == {}
