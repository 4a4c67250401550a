#!/usr/bin/env python3
"""Regenerates the tables of docs/stats.md from src/core/stats.h (the one
declaration of every counter).  The prose around the tables is kept.
tests/unit checks that the document names every counter."""
import pathlib
import re

root = pathlib.Path(__file__).resolve().parent.parent
src = (root / "src/core/stats.h").read_text()


def table(macro):
    body = src[src.index("#define " + macro):]
    body = body[: body.index("\n\n")].replace("\\\n", " ")
    rows = []
    for m in re.finditer(r'X\((\w+),\s*(gauge|counter),\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)', body):
        doc = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(3)))
        rows.append(f"| `{m.group(1)}` | {m.group(2)} | {doc} |")
    return "\n".join(["| name | kind | meaning |", "|---|---|---|"] + rows)


doc_path = root / "docs/stats.md"
doc = doc_path.read_text()
for macro, marker in (("LAZYMALLOC_GLOBAL_STATS", "global"), ("LAZYMALLOC_HEAP_STATS", "heap")):
    start, end = f"<!-- {marker}-table -->", f"<!-- /{marker}-table -->"
    before, rest = doc.split(start, 1)
    _, after = rest.split(end, 1)
    doc = before + start + "\n" + table(macro) + "\n" + end + after
doc_path.write_text(doc)
