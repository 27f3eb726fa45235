"""The repository's pages speak for themselves: every link in README.md and docs/ leads to a
file (and heading) in the repository, README links to every page of docs/, and no page points
outside the repository."""
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page):
    """GitHub's heading anchors of a markdown page."""
    found = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_lead_inside_the_repository(page):
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.is_relative_to(REPO), f"{page.name}: {target} leaves the repository"
        assert resolved.exists(), f"{page.name}: {target} does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{page.name}: no heading #{anchor}"


def test_readme_links_every_page_of_docs():
    readme = REPO / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve()
              for t in LINK.findall(readme.read_text())}
    assert set(p.resolve() for p in PAGES[1:]) <= linked


def test_no_file_points_outside_the_repository():
    for page in PAGES:
        assert "../shared" not in page.read_text(), page.name
