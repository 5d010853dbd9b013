"""The website's licences and its links to the course's repository (site/repository.py,
site/conf.py, site/_templates/course-footer.html).

Every page names the two licences in its footer and links the two files, which the site holds.
The repository's address comes from one place (pyproject.toml's [tool.lowprec-course], overridden
by COURSE_REPO_URL, else an https `origin`): the site is built both ways, without one (test_site.py's
``site`` fixture, shared) and once more with one (``site_with_repository``), and a few pages of
each are read: with an address, the repository, issue and "edit this page" links on every page
and the Colab and Binder buttons on the chapters; without, none of them.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import tomllib

import pytest
import test_site
from test_site import DOCS, NOTEBOOKS, ROOT, Page, build_site, local_target, page_of

site = test_site.site  # the fixture that builds the site without a repository, once per session

EXAMPLE = "https://github.com/example-org/lowprec-course"
LICENCE_FILES = {"LICENSE": "LICENSE.txt", "LICENSE-CONTENT": "LICENSE-CONTENT.txt"}
# what the pages draw only when there is a repository: the theme's repository, issue, edit and
# launch buttons, the chapter's launch buttons, the footer's link, and links to the launch services
WITH_REPOSITORY_ONLY = re.compile(
    r"btn-source-(repository|issues|edit)-button|launch-buttons|launch-button|course-repository"
    r"|colab\.research\.google\.com|mybinder\.org"
)


def load_repository():
    """site/repository.py (site/ is not a package)."""
    spec = importlib.util.spec_from_file_location("repository", ROOT / "site" / "repository.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


repository = load_repository()


@pytest.fixture(scope="module")
def site_with_repository(tmp_path_factory):
    """The site built as the Pages workflow builds it from a GitHub clone: with an address."""
    return build_site(tmp_path_factory.mktemp("site-repo"), repository=EXAMPLE + ".git")


def sample_pages(html):
    """A few pages of every kind: the home page, this folder's pages, the docs, two chapters."""
    names = ["index.html", "explorer.html", "references.html"]
    names += [f"docs/{doc.stem}.html" for doc in DOCS]
    names += [f"notebooks/{nb.stem}.html" for nb in (NOTEBOOKS[0], NOTEBOOKS[-1])]
    return {name: html / name for name in names}


def source_in_repository(name: str) -> str:
    """Where the repository keeps the source of a page of the site."""
    stem = name.removesuffix(".html")
    if stem.startswith("notebooks/"):
        return f"{stem}.ipynb"
    return f"{stem}.md" if stem.startswith("docs/") else f"site/{stem}.md"


# --- where the address comes from -----------------------------------------------------------


def course_root(tmp_path, setting: str = "", origin: str | None = None):
    """A folder with a pyproject.toml holding `setting` and, if `origin` is given, a git clone
    whose origin is `origin`."""
    tmp_path.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text(
        f'[project]\nname = "x"\n[tool.lowprec-course]\nrepository-url = "{setting}"\nrepository-branch = "dev"\n'
    )
    if origin is not None:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
        subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", origin], check=True)
    return tmp_path


def test_the_address_comes_from_the_setting_the_environment_or_an_https_origin(tmp_path):
    url = repository.repository_url
    plain = course_root(tmp_path / "plain")
    assert url(plain, {}) is None  # no setting, no git: none
    assert url(plain, {"COURSE_REPO_URL": EXAMPLE + "/"}) == EXAMPLE
    configured = course_root(tmp_path / "set", setting=EXAMPLE + ".git", origin="https://github.com/a/b.git")
    assert url(configured, {}) == EXAMPLE  # the setting before the origin
    assert url(configured, {"COURSE_REPO_URL": "https://gitlab.com/c/d"}) == "https://gitlab.com/c/d"
    assert url(configured, {"COURSE_REPO_URL": ""}) is None  # set and empty: no repository
    assert repository.branch(configured) == "dev"
    assert url(course_root(tmp_path / "https", origin="https://github.com/a/b.git"), {}) == "https://github.com/a/b"
    # an ssh address, a local path or an address with credentials in it is not put on a page
    for origin in ("git@github.com:a/b.git", "/work/course", "https://user:token@github.com/a/b"):
        assert url(course_root(tmp_path / str(abs(hash(origin))), origin=origin), {}) is None, origin


def test_launch_links_open_the_chapters_notebook():
    path = "notebooks/01_float_formats.ipynb"
    links = repository.launch_links(EXAMPLE, "main", path)
    assert links == {
        "Colab": f"https://colab.research.google.com/github/example-org/lowprec-course/blob/main/{path}",
        "Binder": f"https://mybinder.org/v2/gh/example-org/lowprec-course/main?urlpath=lab/tree/{path}",
    }
    # Colab opens notebooks from GitHub alone; Binder clones any public git repository
    other = repository.launch_links("https://gitlab.com/a/b", "main", path)
    assert list(other) == ["Binder"]
    assert other["Binder"].startswith("https://mybinder.org/v2/git/https%3A%2F%2Fgitlab.com%2Fa%2Fb/main?")


# --- the licences ---------------------------------------------------------------------------


def test_the_licences_are_at_the_root_and_named_in_pyproject_and_the_readme():
    mit = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert mit.startswith("MIT License") and "Copyright (c) 2026 The course authors" in mit
    content = (ROOT / "LICENSE-CONTENT").read_text(encoding="utf-8")
    assert "Copyright (c) 2026 The course authors" in content
    # the licence's own text, whole: its title, its eight sections, its last line
    assert "Creative Commons Attribution 4.0 International Public License" in content
    assert [int(n) for n in re.findall(r"^Section (\d) -- ", content, re.MULTILINE)] == list(range(1, 9))
    assert content.rstrip().endswith("Creative Commons may be contacted at creativecommons.org.")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT AND CC-BY-4.0"
    assert project["license-files"] == list(LICENCE_FILES)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Licence", 1)[1].split("\n## ", 1)[0]
    for name in ("LICENSE", "LICENSE-CONTENT", "MIT", "CC BY 4.0"):
        assert name in section, name


def test_every_page_names_both_licences_in_its_footer_and_the_site_holds_them(site):
    for name, copy in LICENCE_FILES.items():
        assert (site / copy).read_bytes() == (ROOT / name).read_bytes()
    html_pages = [p for p in site.rglob("*.html") if not {"_static", "_sources"} & set(p.relative_to(site).parts)]
    assert len(html_pages) > len(NOTEBOOKS)
    for path in html_pages:
        raw = path.read_text(encoding="utf-8")
        footer = raw.split('<p class="course-footer">', 1)
        assert len(footer) == 2, f"{path.relative_to(site)}: no licence in the footer"
        text = footer[1].split("</p>", 1)[0]
        assert "MIT licence" in text and "CC BY 4.0" in text, path
        targets = {local_target(site, path, href) for href in re.findall(r'href="([^"]+)"', text)}
        assert {site / copy for copy in LICENCE_FILES.values()} <= targets, path
        assert site / "CITATION.cff" in targets, f"{path.relative_to(site)}: the footer does not link CITATION.cff"


def test_the_site_holds_the_citation_file_as_the_repository_has_it(site):
    assert (site / "CITATION.cff").read_bytes() == (ROOT / "CITATION.cff").read_bytes()


# --- with and without a repository ----------------------------------------------------------


def test_without_a_repository_no_page_links_one_or_offers_to_launch(site):
    for name, path in sample_pages(site).items():
        raw = path.read_text(encoding="utf-8")
        assert not WITH_REPOSITORY_ONLY.search(raw), f"{name}: {WITH_REPOSITORY_ONLY.search(raw)}"


def test_with_a_repository_every_page_links_it_its_issues_and_its_source(site_with_repository):
    html = site_with_repository
    for name, path in sample_pages(html).items():
        page = Page(path.read_text(encoding="utf-8"))
        assert WITH_REPOSITORY_ONLY.search(page.raw), name  # the same pattern finds them here
        assert EXAMPLE in page.links, f"{name}: no link to the repository"
        assert any(link.startswith(f"{EXAMPLE}/issues") for link in page.links), f"{name}: no issue link"
        edit = f"{EXAMPLE}/edit/main/{source_in_repository(name)}"
        assert edit in page.links, f"{name}: no 'edit this page' link to {edit}"
        assert (ROOT / source_in_repository(name)).is_file(), name
        launch = [link for link in page.links if "colab.research" in link or "mybinder.org" in link]
        if name.startswith("notebooks/"):
            notebook = f"{name.removesuffix('.html')}.ipynb"
            colab = f"https://colab.research.google.com/github/example-org/lowprec-course/blob/main/{notebook}"
            binder = f"https://mybinder.org/v2/gh/example-org/lowprec-course/main?urlpath=lab/tree/{notebook}"
            assert colab in launch and binder in launch, f"{name}: {launch}"
            assert 'class="launch-button launch-colab"' in page.raw, name  # the buttons in the chapter's box
            assert 'class="launch-button launch-binder"' in page.raw, name
        else:
            assert not launch, f"{name}: launch links on a page that is not a chapter: {launch}"


def test_with_a_repository_the_page_the_build_writes_has_no_edit_link(site_with_repository):
    """The index of the exercises (site/exercise_index.py) has no source file of its own to edit:
    it links the repository and its issues, and no "edit this page"."""
    page = Page((site_with_repository / "exercises.html").read_text(encoding="utf-8"))
    assert EXAMPLE in page.links and any(link.startswith(f"{EXAMPLE}/issues") for link in page.links)
    assert not [link for link in page.links if "/edit/" in link], page.links
    assert "btn-source-edit-button" not in page.raw


def test_with_a_repository_the_chapter_buttons_open_each_chapters_own_notebook(site_with_repository):
    for notebook in NOTEBOOKS:
        raw = page_of(site_with_repository, notebook).read_text(encoding="utf-8")
        buttons = re.findall(r'<a class="launch-button launch-(\w+)" href="([^"]+)"', raw)
        assert [kind for kind, _ in buttons] == ["colab", "binder"], notebook.name
        assert all(href.endswith(f"notebooks/{notebook.name}") for _, href in buttons), buttons
