#!/usr/bin/env python3
"""The docs say what the binary does:
- docs/reference.md is exactly what `exprun plugins --markdown` prints (regenerate it with
  `build/exprun plugins --markdown > docs/reference.md`);
- every `exprun ...` or `scripts/main.sh ...` command line in README.md and docs/*.md that names a spec
  in experiments/ is a spec `exprun validate` accepts with that line's --set options.
Usage: check_docs.py SOURCE_DIR EXPRUN"""
import pathlib
import re
import shlex
import subprocess
import sys

root, exe = pathlib.Path(sys.argv[1]), sys.argv[2]
failures = []

reference = root / "docs" / "reference.md"
printed = subprocess.run([exe, "plugins", "--markdown"], capture_output=True, text=True, check=True).stdout
if not reference.exists() or reference.read_text() != printed:
    failures.append("docs/reference.md differs from `exprun plugins --markdown` "
                    "(regenerate: build/exprun plugins --markdown > docs/reference.md)")


def command_lines(text):
    """Command lines in code blocks and inline code: those starting with exprun or scripts/main.sh."""
    lines = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)  # continuation lines
        lines += joined.splitlines()
    lines += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    out = []
    for line in lines:
        line = line.split(" #", 1)[0].strip()
        m = re.search(r"(?:^|\s)((?:\S*/)?exprun\s+\S.*|scripts/main\.sh\s+\S.*)$", line)
        if m:
            out.append(m.group(1))
    return out


checked = 0
for doc in [root / "README.md"] + sorted((root / "docs").glob("*.md")):
    for line in command_lines(doc.read_text()):
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        specs = [w for w in words if re.fullmatch(r"experiments/[\w./-]+\.yaml", w)]
        if not specs:
            continue
        sets = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--set"]
        sets += [w[len("--set="):] for w in words if w.startswith("--set=")]
        for spec in specs:
            args = [exe, "validate", str(root / spec)] + [a for s in sets for a in ("--set", s)]
            r = subprocess.run(args, capture_output=True, text=True)
            checked += 1
            if r.returncode != 0:
                failures.append(f"{doc.relative_to(root)}: `{line}`: {r.stderr.strip().splitlines()[-1:]}")

print(f"docs: {checked} command line(s) with a spec validated")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
