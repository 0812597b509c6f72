#!/usr/bin/env python3
"""File headers state purpose, briefly; history stays in the commits. In runner/ and plugins/ the
leading comment block of every .h, .cpp and .cu file is at most 8 lines, and no comment names an
issue number or a date. Exits 1 naming each file (and line) that breaks either rule.
Usage: headers.py SOURCE_DIR"""
import pathlib
import re
import sys

top = pathlib.Path(sys.argv[1])
history = re.compile(r"\b[Ii]ssues? \d+|§|\b20\d\d-\d\d-\d\d\b")
problems = []
for room in ("runner", "plugins"):
    for path in sorted((top / room).rglob("*")):
        if path.suffix not in (".h", ".cpp", ".cu"):
            continue
        name = path.relative_to(top)
        lines = path.read_text(errors="replace").splitlines()
        header = 0
        while header < len(lines) and lines[header].startswith("//"):
            header += 1
        if header > 8:
            problems.append(f"{name}: a header of {header} comment lines (at most 8: what the file is for, its main rule)")
        for i, line in enumerate(lines, 1):
            comment = line.split("//", 1)[1] if "//" in line else ""
            if history.search(comment):
                problems.append(f"{name}:{i}: history in a comment: {comment.strip()[:100]}")
for p in problems:
    print(p)
print(f"headers: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
