#!/usr/bin/env python3
"""The rooms of runner/ form no cycle: every #include "runner/<room>/..." of a file in runner/<room>/
is an edge between rooms; the graph must be acyclic. Prints the rooms in layer order (each after the
rooms it uses) and exits 1 naming a cycle's edges and the files that make them.
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
if "--print" in sys.argv:
    for r in order:
        print(f"{r:12s} uses {', '.join(uses[r]) or '-'}")
print(f"rooms: {len(rooms)}, no cycle")
