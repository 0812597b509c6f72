#!/usr/bin/env python3
"""Every file exprun writes goes through the one atomic writer (runner/util/AtomicFile: write, fsync,
rename, fsync the folder): no other place in runner/ or plugins/ may open a file for writing,
rename, truncate or copy one, except the places listed here with the reason each is not a whole-file
write. Exits 1 naming each unlisted call site (file:line and the line).
Usage: writers.py SOURCE_DIR"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
# Primitives that write, replace or cut a file.
primitive = re.compile(
    r"std::ofstream|std::fstream|\bfopen\s*\([^)]*\"[wa+]|::open\s*\([^)]*O_(WRONLY|RDWR|CREAT|TRUNC)|"
    r"\brename\s*\(|::truncate\s*\(|::ftruncate\s*\(|filesystem::copy|fs::copy|torch::save\s*\(|::link\s*\(")
# (file, what the line contains) -> why it is allowed.
allowed = {
    ("runner/util/AtomicFile.cpp", "::open"): "the atomic writer itself",
    ("runner/util/AtomicFile.cpp", "rename"): "the atomic writer itself",
    ("runner/live/AppendFile.cpp", "O_APPEND"): "append-only logs (per-step CSV, TensorBoard events); cut back atomically on resume",
    ("runner/util/Spawn.cpp", "logFile"): "a child process's output, as a shell redirection would",
    ("runner/metrics/Meters.cpp", "/proc/self/clear_refs"): "a kernel control file, not a file on disk",
    ("runner/checkpoint/FolderLock.cpp", "std::ofstream out(tmp"): "the lock's private temporary file, linked into place atomically",
    ("runner/checkpoint/FolderLock.cpp", "::link("): "taking the lock: link() fails when a lock is there",
    ("runner/checkpoint/FolderLock.cpp", "rename(path_"): "moving a stale lock aside before taking it",
    ("runner/checkpoint/CheckpointStore.cpp", "rename("): "committing a checkpoint folder (its files fsynced by writeFile, the parent after)",
}
bad = []
for path in sorted(list((root / "runner").rglob("*.cpp")) + list((root / "runner").rglob("*.h")) +
                   list((root / "plugins").rglob("*.cpp"))):
    rel = str(path.relative_to(root))
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        code = line.split("//")[0]
        if not primitive.search(code):
            continue
        if not any(rel == f and what in code for (f, what) in allowed):
            bad.append(f"{rel}:{n}: {line.strip()}")
if bad:
    print("file writes outside the atomic writer (runner/util/AtomicFile.h); use writeFileAtomically, or list the "
          "place in tests/layout/writers.py with the reason it is not a whole-file write:")
    print("\n".join("  " + b for b in bad))
    sys.exit(1)
print(f"writers: every file write goes through the atomic writer ({len(allowed)} listed exceptions)")
