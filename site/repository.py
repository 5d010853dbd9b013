"""Where the course's repository is, read from one place, and the links the website draws from it.

The address is `[tool.lowprec-course] repository-url` in pyproject.toml, which the environment
variable COURSE_REPO_URL overrides (set and empty: no repository). When neither gives one, it is
`git remote get-url origin` if that is an https URL (a clone made by GitHub Actions' checkout is);
else there is none, and the pages show no repository, issue, "edit this page", Colab or Binder
link. site/conf.py reads it once per build.
"""

from __future__ import annotations

import os
import subprocess
import tomllib
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, urlsplit

ENV_VAR = "COURSE_REPO_URL"
SETTINGS = "lowprec-course"  # the [tool.<name>] table of pyproject.toml
COLAB = "https://colab.research.google.com"
BINDER = "https://mybinder.org"


def settings(root: Path) -> dict:
    """The course's table of pyproject.toml (empty when there is none)."""
    with open(root / "pyproject.toml", "rb") as f:
        return tomllib.load(f).get("tool", {}).get(SETTINGS, {})


def normalise(url: str) -> str | None:
    """An https repository address without its ``.git`` and trailing slash; None for anything
    else (an ssh address, a local path, an empty string)."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.netloc or parts.path.strip("/").count("/") < 1:
        return None
    if "@" in parts.netloc:  # https://user:token@host/...: never put credentials in a page
        return None
    return url.rstrip("/").removesuffix(".git")


def git_origin(root: Path) -> str:
    """`git remote get-url origin` in `root`, or "" where git or the remote is missing."""
    try:
        result = subprocess.run(
            ["git", "remote", "get-url", "origin"], cwd=root, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def repository_url(root: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """The repository's https address (see the module's docstring), or None."""
    environ = os.environ if environ is None else environ
    if ENV_VAR in environ:
        return normalise(environ[ENV_VAR])
    configured = settings(root).get("repository-url", "")
    if configured:
        return normalise(configured)
    return normalise(git_origin(root))


def branch(root: Path) -> str:
    return settings(root).get("repository-branch", "") or "main"


def github_parts(url: str) -> tuple[str, str] | None:
    """(owner, name) of a GitHub repository address; None for another host."""
    parts = urlsplit(url)
    path = parts.path.strip("/").split("/")
    if parts.netloc.lower() != "github.com" or len(path) != 2:
        return None
    return path[0], path[1]


def launch_links(url: str, branch: str, path: str) -> dict[str, str]:
    """Where a notebook of the repository (`path`, relative to its root) opens to run: Colab
    (GitHub repositories only: Colab opens notebooks from GitHub) and Binder (any public git
    repository). Name -> URL."""
    links = {}
    github = github_parts(url)
    if github:
        owner, name = github
        links["Colab"] = f"{COLAB}/github/{owner}/{name}/blob/{branch}/{path}"
        binder = f"{BINDER}/v2/gh/{owner}/{name}/{branch}"
    else:
        binder = f"{BINDER}/v2/git/{quote(url, safe='')}/{branch}"
    links["Binder"] = f"{binder}?urlpath={quote(f'lab/tree/{path}')}"
    return links
