"""The documentation's generated pages, from the code and the results files, so that they cannot drift.

- `reference/config.md`: every config key of `hypermappo.config.Config` (its dataclasses, filled by `opt(default,
  help, choices=, min=, max=)`) with its type, default, allowed values and help;
- `reference/cli.md`: every `hypermappo` command and its arguments, from the argparse parser of `hypermappo.cli`
  (and `hypermappo bench`'s own parser in benchmarks/throughput.py);
- `benchmarks/*.md`: one page per results file of benchmarks/results/ (the `.md` a benchmark script wrote beside
  its `.json`, included as it is, or a table built from the `.json`), its plots and raw data, grouped by the
  question it answers (docs/benchmarks.yml: titles, categories and a few words on what each shows; no figures).

Used two ways: as a MkDocs hook (mkdocs.yml `hooks:`; the pages are generated in memory on every build, nothing is
written under docs/), and as a script, `python docs/gen_ref.py [OUT_DIR]`, which writes the same pages to OUT_DIR
(default build/docs-generated) to read them without building the site.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import importlib.util
import io
import json
import re
import sys
import typing
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
NOTES = Path(__file__).resolve().parent / "benchmarks.yml"
sys.path.insert(0, str(ROOT / "src"))


# --------------------------------------------------------------------------- helpers


def cell(text) -> str:
    """Text for a Markdown table cell: pipes escaped, HTML-significant characters escaped, one line."""
    return html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")


def code(value) -> str:
    """A value as inline code in a table cell (backticks inside are doubled out of the way)."""
    text = json.dumps(value) if isinstance(value, (list, dict)) else repr(value) if isinstance(value, str) else str(value)
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


# --------------------------------------------------------------------------- config reference


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is list:
        return f"list[{_type_name(typing.get_args(tp)[0])}]"
    return getattr(tp, "__name__", str(tp))


def _allowed(meta: dict) -> str:
    if meta.get("choices"):
        return ", ".join(code(c) for c in meta["choices"])
    lo, hi = meta.get("min"), meta.get("max")
    parts = []
    if lo is not None:
        parts.append(f"{'>' if meta.get('min_exclusive') else '≥'} {lo:g}")
    if hi is not None:
        parts.append(f"{'<' if meta.get('max_exclusive') else '≤'} {hi:g}")
    return " and ".join(parts)


def config_page() -> str:
    from hypermappo import config as config_mod

    cfg = config_mod.Config()
    lines = [
        "# Configuration keys",
        "",
        "Generated from `src/hypermappo/config.py` (every field of `Config` and its sections). Set a key in a preset "
        "YAML under `configs/` or on the command line as `key=value`, dotted for a section: `ppo.lr_actor=5e-4`, "
        "`model.hidden_sizes=128,128`, `env_kwargs={N: 4}`. Unknown keys, wrong types, values outside the allowed "
        "range, a key given twice and a key that nothing in the config reads are one-line errors (exit code 2). "
        "`hypermappo config --keys` prints the same list; `hypermappo config PRESET key=value ...` prints a "
        "run's effective config.",
        "",
    ]
    hints = typing.get_type_hints(config_mod.Config)
    top = [f for f in dataclasses.fields(cfg) if not dataclasses.is_dataclass(getattr(cfg, f.name))]
    sections = [f for f in dataclasses.fields(cfg) if dataclasses.is_dataclass(getattr(cfg, f.name))]
    lines += ["| section | what it configures |", "|---|---|", "| [top level](#top-level) | "
              + cell((config_mod.Config.__doc__ or "").strip().splitlines()[0]) + " |"]
    for f in sections:
        lines.append(f"| [`{f.name}.*`](#{f.name}) | {cell(_doc(type(getattr(cfg, f.name))).split('. ')[0])} |")
    lines += ["", "## top level", ""]
    lines += _field_table(cfg, top, hints, "")
    for f in sections:
        obj = getattr(cfg, f.name)
        doc = _doc(type(obj))
        lines += ["", f"## {f.name}", ""]
        if doc:
            lines += [doc, ""]
        lines += _field_table(obj, dataclasses.fields(obj), typing.get_type_hints(type(obj)), f.name + ".")
    return "\n".join(lines) + "\n"


def _doc(cls) -> str:
    """A config section's docstring on one line ("" for a dataclass without one: its generated signature)."""
    doc = " ".join((cls.__doc__ or "").split())
    return "" if doc.startswith(cls.__name__ + "(") else doc


def _field_table(obj, fields, hints, prefix: str) -> list[str]:
    rows = ["| key | type | default | allowed | help |", "|---|---|---|---|---|"]
    for f in fields:
        meta = dict(f.metadata)
        rows.append(f"| `{prefix}{f.name}` | {_type_name(hints[f.name])} | {code(getattr(obj, f.name))} | "
                    f"{_allowed(meta)} | {cell(meta.get('help', ''))} |")
    return rows


# --------------------------------------------------------------------------- CLI reference


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _arguments_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | default | help |", "|---|---|---|"]
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        name = ", ".join(a.option_strings) if a.option_strings else (a.metavar or a.dest)
        if a.option_strings and a.nargs != 0:
            name += " " + (a.metavar or a.dest.upper())
        if a.nargs in ("*", "+") and not a.option_strings:
            name += " ..."
        default = "" if a.default in (None, False, argparse.SUPPRESS) or a.required else code(a.default)
        extra = f" (one of {', '.join(map(str, a.choices))})" if a.choices else ""
        required = " Required." if a.required and a.option_strings else ""
        rows.append(f"| `{cell(name)}` | {default} | {cell((a.help or '') + extra)}{required} |")
    return rows


def cli_page() -> str:
    from hypermappo import cli

    parser = cli._parser()
    commands = _subcommands(parser)
    doc = cli.__doc__ or ""
    exit_codes = doc.split("Exit codes", 1)[1].split("\n", 1)[1] if "Exit codes" in doc else ""
    lines = [
        "# Command line",
        "",
        "Generated from the argparse parser of `src/hypermappo/cli.py`. Every command also prints this with "
        "`hypermappo COMMAND --help`.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    for name, sub in commands.items():
        lines.append(f"| [`{name}`](#{name}) | {cell(sub.description or '')} |")
    lines += ["", "Exit codes (each failure prints one line on stderr, no traceback):", "", "```text",
              *[line[2:] if line.startswith("  ") else line for line in exit_codes.strip("\n").splitlines()],
              "```", ""]
    for name, sub in commands.items():
        if name == "bench":  # benchmarks/throughput.py parses its own options
            lines += ["## bench", "", "`hypermappo bench ARGS` runs `benchmarks/throughput.py` of a source checkout "
                      "with its own options (end-to-end training throughput: env-steps/s, the collection / update "
                      "split, the update-only floor and peak RSS per algorithm, actor, env and E):", "", "```text",
                      _bench_help().strip(), "```", ""]
            continue
        lines += [f"## {name}", "", sub.description or "", "", "```text", sub.format_usage().strip(), "```", ""]
        lines += _arguments_table(sub)
        if sub.epilog:
            lines += ["", "```text", sub.epilog.strip(), "```"]
        lines.append("")
    return "\n".join(lines)


def _bench_help() -> str:
    path = ROOT / "benchmarks" / "throughput.py"
    spec = importlib.util.spec_from_file_location("hypermappo_docs_throughput", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = io.StringIO()
    with redirect_stdout(out):
        try:
            module.parse_args(["--help"], prog="hypermappo bench")
        except SystemExit:
            pass
    return out.getvalue()


# --------------------------------------------------------------------------- benchmark pages

# "issue N" in a results file's text is a note from the project's tracker, not for a reader of the docs
_ISSUE = re.compile(r"\s*\(issue \d+[^)]*\)|\s+of issue \d+|\s*\bissue \d+\b")


def _load_notes() -> dict:
    import yaml

    data = yaml.safe_load(NOTES.read_text()) if NOTES.exists() else {}
    return data or {}


def _results() -> dict[str, dict[str, Path]]:
    """stem -> {suffix: path} for every results file that has a .json or a .md."""
    out: dict[str, dict[str, Path]] = {}
    for p in sorted(RESULTS.iterdir()):
        if p.is_file() and p.suffix in (".json", ".md", ".png", ".csv"):
            out.setdefault(p.stem, {})[p.suffix] = p
    return {stem: files for stem, files in out.items() if ".json" in files or ".md" in files}


def _json_tables(data, limit: int = 400) -> list[str]:
    """A generic rendering of a results .json: its scalar leaves as (key, value) rows, lists of records as tables."""
    lines: list[str] = []
    scalars: list[tuple[str, object]] = []

    def walk(node, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else str(k))
        elif isinstance(node, list) and node and all(isinstance(r, dict) for r in node):
            keys = list(dict.fromkeys(k for r in node for k, v in r.items() if not isinstance(v, (dict, list))))
            if keys:
                lines.extend(["", f"`{path}`:", "", "| " + " | ".join(cell(k) for k in keys) + " |",
                              "|" + "---|" * len(keys)])
                lines.extend("| " + " | ".join(cell(_fmt(r.get(k, ""))) for k in keys) + " |" for r in node)
            for i, r in enumerate(node):
                for k, v in r.items():
                    if isinstance(v, (dict, list)):
                        walk(v, f"{path}[{i}].{k}")
        elif isinstance(node, list):
            scalars.append((path, ", ".join(_fmt(v) for v in node)))
        else:
            scalars.append((path, _fmt(node)))

    walk(data, "")
    table = ["| key | value |", "|---|---|"] + [f"| `{cell(k)}` | {cell(v)} |" for k, v in scalars[:limit]]
    if len(scalars) > limit:
        table.append(f"| … | {len(scalars) - limit} more values in the raw file |")
    return table + lines


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def benchmark_pages() -> tuple[dict[str, str], dict[str, Path], list]:
    """(page path -> Markdown, site path -> file to copy, nav entries) for docs/benchmarks/."""
    notes = _load_notes()
    categories: dict[str, list] = {c["name"]: [] for c in notes.get("categories", [])}
    info = notes.get("results", {}) or {}
    pages: dict[str, str] = {}
    copies: dict[str, Path] = {}
    for stem, files in _results().items():
        note = info.get(stem, {}) or {}
        md_text = _ISSUE.sub("", files[".md"].read_text()) if ".md" in files else None
        heading = re.match(r"#\s+(.+)", md_text) if md_text else None
        title = note.get("title") or (heading.group(1).strip() if heading else stem.replace("_", " "))
        body = [f"# {title}", ""]
        if note.get("about"):
            body += [" ".join(str(note["about"]).split()), ""]
        raw = []
        for suffix in (".json", ".csv"):
            if suffix in files:
                copies[f"benchmarks/data/{stem}{suffix}"] = files[suffix]
                raw.append(f"[{stem}{suffix}](data/{stem}{suffix})")
        raw_text = f" (raw data: {', '.join(raw)})" if raw else ""
        body += [f"Results file: `benchmarks/results/{stem}.*`{raw_text}.", ""]
        if ".png" in files:
            copies[f"benchmarks/{stem}.png"] = files[".png"]
        if md_text is not None:
            if heading:
                md_text = md_text[heading.end():]
            md_text = re.sub(r"^(#+)(\s)", r"#\1\2", md_text, flags=re.M)  # below the page's own title
            body += ["## The results file", "", md_text.strip(), ""]
            if ".png" in files and f"{stem}.png" not in md_text:
                body += [f"![{title}]({stem}.png)", ""]
        else:
            if ".png" in files:
                body += [f"![{title}]({stem}.png)", ""]
            body += ["## The results file", "", *_json_tables(json.loads(files[".json"].read_text())), ""]
        pages[f"benchmarks/{stem}.md"] = "\n".join(body)
        categories.setdefault(note.get("category", "Other"), []).append((title, stem))
    index = ["# Benchmarks", "", " ".join(str(notes.get("intro", "")).split()), ""]
    nav = [{"Overview": "benchmarks/index.md"}]
    described = {c["name"]: c.get("about", "") for c in notes.get("categories", [])}
    order = {stem: i for i, stem in enumerate(info)}
    for name, entries in categories.items():
        if not entries:
            continue
        entries.sort(key=lambda e: order.get(e[1], len(order)))
        index += [f"## {name}", "", " ".join(str(described.get(name, "")).split()), "", "| page | results file |",
                  "|---|---|"]
        index += [f"| [{cell(t)}]({s}.md) | `{s}` |" for t, s in entries]
        index.append("")
        nav.append({name: [{t: f"benchmarks/{s}.md"} for t, s in entries]})
    pages["benchmarks/index.md"] = "\n".join(index)
    return pages, copies, nav


def all_pages() -> tuple[dict[str, str], dict[str, Path], list]:
    pages, copies, nav = benchmark_pages()
    pages["reference/config.md"] = config_page()
    pages["reference/cli.md"] = cli_page()
    return pages, copies, nav


# --------------------------------------------------------------------------- MkDocs hook

_GENERATED: tuple | None = None


def _generated():
    global _GENERATED
    if _GENERATED is None:
        _GENERATED = all_pages()
    return _GENERATED


def on_config(config, **kwargs):
    """Fill the nav's `Benchmarks` entry with the generated pages, grouped by question."""
    global _GENERATED
    _GENERATED = None  # a new build (mkdocs serve): read the code and the results again
    _, _, nav = _generated()
    for i, entry in enumerate(config["nav"] or []):
        if isinstance(entry, dict) and "Benchmarks" in entry:
            config["nav"][i] = {"Benchmarks": nav}
    return config


def on_files(files, config, **kwargs):
    from mkdocs.structure.files import File

    pages, copies, _ = _generated()
    for path, text in pages.items():
        files.append(File.generated(config, path, content=text))
    for path, src in copies.items():
        files.append(File.generated(config, path, abs_src_path=str(src)))
    return files


def main(argv: list[str] | None = None) -> int:
    out = Path((argv or sys.argv[1:] or [str(ROOT / "build" / "docs-generated")])[0])
    pages, copies, _ = all_pages()
    for path, text in pages.items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(text)
    print(f"wrote {len(pages)} pages under {out} ({len(copies)} data files and plots are copied by the site build)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
