"""Every relative link and ``#anchor`` in README.md, docs/, bench/README.md and
experiments/README.md resolves (issue 38, item 8): a moved or renamed page or heading fails here,
not in a reader's browser. Anchors follow GitHub's rule: the heading lowercased, punctuation but
``-`` and ``_`` dropped, spaces to ``-``."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _pages(root: pathlib.Path) -> list[pathlib.Path]:
  return [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "bench" / "README.md",
          root / "experiments" / "README.md"]


def slug(heading: str) -> str:
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
  out, fenced = set(), False
  for line in page.read_text().splitlines():
    if line.startswith("```"):
      fenced = not fenced
    elif not fenced and line.startswith("#"):
      out.add(slug(line.lstrip("#")))
  return out


def broken_links(root: pathlib.Path) -> list[str]:
  bad = []
  for page in _pages(root):
    name = page.relative_to(root)
    for target in LINK.findall(page.read_text()):
      if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
        continue
      path, _, anchor = target.partition("#")
      dest = (page.parent / path).resolve() if path else page
      if not dest.exists():
        bad.append(f"{name}: {target} (no such file)")
      elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        bad.append(f"{name}: {target} (no such heading)")
  return bad


def test_every_relative_link_and_anchor_resolves():
  assert broken_links(ROOT) == []


def test_the_check_finds_a_planted_broken_link_and_anchor(tmp_path):
  (tmp_path / "docs").mkdir()
  (tmp_path / "bench").mkdir()
  (tmp_path / "bench" / "README.md").write_text("# Bench\n")
  (tmp_path / "experiments").mkdir()
  (tmp_path / "experiments" / "README.md").write_text("# Experiments\n")
  (tmp_path / "docs" / "a.md").write_text("# The papers' claims\n\n```\n# not a heading\n```\n")
  (tmp_path / "README.md").write_text(
      "[ok](docs/a.md#the-papers-claims) [gone](docs/b.md) [moved](docs/a.md#not-a-heading) "
      "[web](https://example.org/x#y)\n")
  assert broken_links(tmp_path) == ["README.md: docs/b.md (no such file)",
                                    "README.md: docs/a.md#not-a-heading (no such heading)"]
