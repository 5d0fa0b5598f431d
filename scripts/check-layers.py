#!/usr/bin/env python3
"""The include graph against the module order (docs/architecture.md).

    scripts/check-layers.py [ROOT]

Reads each module's dependencies from CMakeLists.txt's `lockstep_module(NAME DEPS lockstep_X ...)`
lines, then every #include "lockstep/..." under ROOT/lockstep/: a file of module M may include its
own module and the modules M depends on, directly or through others; nothing else. Also reports a
cycle of includes between headers. Prints each offending include (file:line) and exits 1, else
prints the counts and exits 0.
"""
import os
import re
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
cmake = open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8").read()
deps = {}
for m in re.finditer(r"lockstep_module\((\w+)\s+DEPS([^)]*)\)", cmake):
    deps[m.group(1)] = set(re.findall(r"\blockstep_(\w+)", m.group(2)))
if not deps:
    sys.exit("check-layers: no lockstep_module(...) lines in CMakeLists.txt")


def reach(m, seen=None):
    seen = set() if seen is None else seen
    for d in deps.get(m, ()):
        if d not in seen:
            seen.add(d)
            reach(d, seen)
    return seen


allowed = {m: reach(m) | {m} for m in deps}
# the `lockstep` program (lockstep/cli/) links every module
allowed["cli"] = set(deps) | {"cli"}

include = re.compile(r'^\s*#\s*include\s+"lockstep/([^"]+)"')
problems, edges, files = [], {}, 0
src = os.path.join(root, "lockstep")
for dirpath, _, names in os.walk(src):
    for name in names:
        if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
            continue
        path = os.path.join(dirpath, name)
        rel = os.path.relpath(path, src)
        module = rel.split(os.sep)[0]
        if module.endswith(".h"):  # an umbrella header lockstep/M.h belongs to M
            module = module[:-2]
        files += 1
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            m = include.match(line)
            if not m:
                continue
            target = m.group(1)
            tmod = target.split("/")[0]
            tmod = tmod[:-2] if tmod.endswith(".h") else tmod
            edges.setdefault(rel, set()).add(target)
            if module in allowed and tmod not in allowed[module]:
                problems.append(f"lockstep/{rel}:{n}: module {module} includes lockstep/{target} "
                                f"(module {tmod}, not among its dependencies: {sorted(allowed[module] - {module})})")
            if not os.path.exists(os.path.join(src, target)):
                problems.append(f"lockstep/{rel}:{n}: includes lockstep/{target}, which does not exist")

# cycles among headers (pragma once hides them from the compiler)
state = {}


def visit(node, stack):
    state[node] = 1
    stack.append(node)
    for nxt in sorted(edges.get(node, ())):
        if state.get(nxt) == 1:
            cycle = stack[stack.index(nxt):] + [nxt]
            problems.append("include cycle: " + " -> ".join("lockstep/" + c for c in cycle))
        elif nxt not in state:
            visit(nxt, stack)
    stack.pop()
    state[node] = 2


for node in sorted(edges):
    if node not in state:
        visit(node, [])

for p in problems:
    print(p)
if problems:
    sys.exit(1)
print(f"check-layers: {files} files, {sum(len(v) for v in edges.values())} includes, "
      f"{len(deps)} modules: no include against the module order, no cycle")
