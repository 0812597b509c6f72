#!/usr/bin/env python3
"""The rooms of runner/ form no cycle: every #include "runner/<room>/..." of a file in runner/<room>/
is an edge between rooms; the graph must be acyclic. Prints the rooms in layer order (each after the
rooms it uses) and exits 1 naming a cycle's edges and the files that make them.
The core stays the core: no file of runner/ includes one of plugins/ (nothing imports upward); every
header of runner/ is included by runner/ itself, not only by plugins (code one plugin, or only the
image plugins, use lives beside them); the image room plugins/data/image/ includes no plugin; and
docs/architecture.md's table of rooms names exactly runner/'s rooms, and the image room.
Usage: rooms.py SOURCE_DIR [--print]"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1]) / "runner"
include = re.compile(r'^\s*#\s*include\s+"runner/([A-Za-z0-9_]+)/', re.M)
edges = {}  # (from, to) -> files
rooms = sorted(p.name for p in root.iterdir() if p.is_dir())
for path in sorted(root.rglob("*")):
    if path.suffix not in (".h", ".cpp") or path.parent == root:
        continue
    room = path.relative_to(root).parts[0]
    for used in include.findall(path.read_text(errors="replace")):
        if used != room:
            edges.setdefault((room, used), []).append(str(path.relative_to(root.parent)))
uses = {r: sorted({b for (a, b) in edges if a == r}) for r in rooms}

order, state = [], {}


def visit(r, stack):
    if state.get(r) == "done":
        return None
    if state.get(r) == "open":
        return stack[stack.index(r):] + [r]
    state[r] = "open"
    for u in uses.get(r, []):
        cycle = visit(u, stack + [r])
        if cycle:
            return cycle
    state[r] = "done"
    order.append(r)
    return None


for r in rooms:
    cycle = visit(r, [])
    if cycle:
        print("cycle between rooms: " + " -> ".join(cycle))
        for a, b in zip(cycle, cycle[1:]):
            print(f"  {a} -> {b}: " + ", ".join(edges[(a, b)][:5]))
        sys.exit(1)
top = root.parent
problems = []
any_include = re.compile(r'^\s*#\s*include\s+"((?:runner|plugins)/[^"]+)"', re.M)
includers = {}  # header -> files including it (runner/ and plugins/)
for path in sorted(list(root.rglob("*")) + list((top / "plugins").rglob("*"))):
    if path.suffix not in (".h", ".cpp", ".cu"):
        continue
    name = str(path.relative_to(top))
    for header in any_include.findall(path.read_text(errors="replace")):
        includers.setdefault(header, set()).add(name)
        if name.startswith("runner/") and header.startswith("plugins/"):
            problems.append(f"{name} includes {header}: the core includes no plugin")
        if name.startswith("plugins/data/image/") and header.startswith("plugins/") and \
                not header.startswith("plugins/data/image/"):
            problems.append(f"{name} includes {header}: the image room includes no plugin")
for path in sorted(root.rglob("*.h")):
    header = str(path.relative_to(top))
    twin = header[:-2] + ".cpp"
    users = includers.get(header, set()) - {header, twin}
    if not any(u.startswith("runner/") for u in users):
        problems.append(f"{header} is included by no other file of runner/ ({', '.join(sorted(users)) or 'none'}): "
                        "it belongs beside the plugins that use it")
doc = (top / "docs" / "architecture.md").read_text()
listed = set(re.findall(r"^\| ([a-z]+)/ \|", doc, re.M))
if listed != set(rooms):
    problems.append("docs/architecture.md's rooms table: "
                    f"missing {sorted(set(rooms) - listed)}, not in runner/ {sorted(listed - set(rooms))}")
if "plugins/data/image/" not in doc:
    problems.append("docs/architecture.md does not describe the image room plugins/data/image/")
for p in problems:
    print(p)
if problems:
    sys.exit(1)
if "--print" in sys.argv:
    for r in order:
        print(f"{r:12s} uses {', '.join(uses[r]) or '-'}")
print(f"rooms: {len(rooms)}, no cycle")
