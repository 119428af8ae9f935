"""README.md and docs/: every relative link reaches a file and heading that exist, every docs page is linked from the
README, and the README opens with the two fresh-machine commands (the second one is what CI runs)."""

import re

import pytest

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", flags=re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(path):
    """The page without its code blocks and inline code, where brackets are not links and `#` lines not headings."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", path.read_text(encoding="utf-8")))


def anchors(path):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen, result = {}, set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", FENCE.sub("", path.read_text(encoding="utf-8")), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        result.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return result


def relative_links(path):
    return [target for target in LINK.findall(prose(path)) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_relative_links_reach_an_existing_file_and_heading(page):
    for target in relative_links(page):
        file, _, anchor = target.partition("#")
        destination = (page.parent / file).resolve() if file else page
        assert destination.exists(), f"{page.name}: link to {target}: no such file"
        if anchor:
            assert anchor in anchors(destination), f"{page.name}: link to {target}: no such heading"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in relative_links(ROOT / "README.md")}
    assert [page.name for page in PAGES[1:] if page.resolve() not in linked] == []


def test_readme_opens_with_the_two_fresh_machine_commands_and_ci_runs_the_second():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = FENCE.search(readme).group(0)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()[1:-1]]
    assert commands == ["pip install -r requirements.txt && python quickstart.py",
                        "pip install -r requirements-test.txt && python -m pytest tests -q"]
    assert readme.index(first_block) < readme.index("\n## ")  # before any section
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python -m pytest tests -q" in [line.split("&&")[-1].strip() for line in ci.splitlines()]
    assert len(readme.splitlines()) <= 250  # a front door; the detail lives in docs/


def test_the_rewards_page_shows_the_math_system_prompt_the_quickstart_uses():
    """docs/rewards.md says its math examples carry the quickstart's worked example: they cannot drift apart."""
    import quickstart

    examples = FENCE.findall((ROOT / "docs" / "rewards.md").read_text(encoding="utf-8"))
    prompts = [line.split('--system_prompt "')[1].rstrip('"') for block in examples for line in block.splitlines()
               if '--system_prompt "' in line]
    assert prompts and set(prompts) == {quickstart.MATH_SYSTEM_PROMPT}
