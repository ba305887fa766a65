"""The README and the documentation site's sources: short, free of tracker talk, every figure from a results file,
and the generated reference covering every config key and command (docs/gen_ref.py; `make docs` builds the site)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _gen_ref():
    spec = importlib.util.spec_from_file_location("hypermappo_docs_gen_ref", ROOT / "docs" / "gen_ref.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_short_and_says_nothing_of_the_tracker():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    for path in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        assert not re.search(r"\bissues? \d+", path.read_text(), re.I), path


def test_readme_headline_table_is_copied_from_the_results_file_it_cites():
    text = README.read_text()
    section = text.split("## Headline result", 1)[1].split("\n## ", 1)[0]
    cited = re.findall(r"`(benchmarks/results/[\w.]+\.md)`", section)
    assert cited, "the headline table must cite its results file"
    source = (ROOT / cited[0]).read_text()
    source_rows = [[c.strip() for c in line.strip("|").split("|")] for line in source.splitlines()
                   if line.startswith("| ")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| row")]
    assert rows
    for row in rows:  # every cell of a README row appears in the same-named row of the results file
        match = [r for r in source_rows if row[0] in r]
        assert match and all(cell in match[0] for cell in row), row


def test_the_generated_reference_covers_every_config_key_and_command():
    from hypermappo import cli
    from hypermappo.config import _all_keys

    gen = _gen_ref()
    config_page, cli_page = gen.config_page(), gen.cli_page()
    for key in _all_keys():
        assert f"| `{key}` |" in config_page, key
    for name in gen._subcommands(cli._parser()):
        assert f"\n## {name}\n" in cli_page, name


def test_every_results_file_gets_a_benchmark_page():
    gen = _gen_ref()
    pages, copies, nav = gen.benchmark_pages()
    for stem in gen._results():
        assert f"benchmarks/{stem}.md" in pages, stem
    assert "benchmarks/index.md" in pages
