#!/usr/bin/env python3
"""Checks that #include "..." lines follow the layer order in README.md.

README.md holds, between the markers `<!-- layers:begin -->` and
`<!-- layers:end -->`, a table of layers (folders) and the layers each may
include. A C or C++ file in layer L (the longest layer folder its path starts
with) may include headers of its own layer and of the layers listed for L, and
nothing else of heaplab's. Generated headers (generated/...) and system
headers (<...>) are not heaplab layers. The declared graph itself must have
no cycle, and every folder with C/C++ sources must belong to a layer.

Usage:
  check-layers.py [REPO]      check the tree (default: this script's repo)
  check-layers.py --self-test plant a wrong-way include in a copy of the tree
                              and show that the check fails on it
Exit status: 0 clean, 1 violations (one line each: FILE:LINE: ...), 2 bad table.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SOURCE_EXT = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".inc", ".ipp", ".tcc")
INCLUDE = re.compile(r'^\s*#\s*include\s*(["<])([^">]+)[">]')
# A source file named in a CMakeLists.txt by a path into the tree.
CMAKE_SOURCE = re.compile(r'(\$\{(?:PROJECT|CMAKE)_SOURCE_DIR\}/|\.\./)([\w./-]+\.(?:c|cc|cpp|cxx))\b')
SKIP_DIRS = {".git", "build", "results", "node_modules"}


def parse_layers(readme):
    text = open(readme, encoding="utf-8").read()
    m = re.search(r"<!-- layers:begin -->(.*?)<!-- layers:end -->", text, re.S)
    if not m:
        raise ValueError(f"{readme}: no <!-- layers:begin --> ... <!-- layers:end --> block")
    layers = {}
    order = []
    for lineno, line in enumerate(m.group(1).splitlines(), 1):
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        if len(cells) < 2 or cells[0] in ("layer", ""):
            continue
        name = cells[0]
        uses = [u.strip().strip("`") for u in cells[1].replace(",", " ").split()]
        uses = [u for u in uses if u not in ("-", "nothing", "")]
        if name in layers:
            raise ValueError(f"{readme}: layer '{name}' listed twice")
        layers[name] = uses
        order.append(name)
    for name, uses in layers.items():
        for u in uses:
            if u not in layers:
                raise ValueError(f"{readme}: layer '{name}' may use '{u}', which is no layer of the table")
    # No cycles: a layer may use only layers listed before it.
    for i, name in enumerate(order):
        for u in layers[name]:
            if order.index(u) >= i:
                raise ValueError(f"{readme}: layer '{name}' uses '{u}', listed after it (the order must be a layer order)")
    return layers


def layer_of(path, layers):
    best = None
    for name in layers:
        if path == name or path.startswith(name + "/"):
            if best is None or len(name) > len(best):
                best = name
    return best


def cmake_files(repo):
    out = []
    for root, dirs, names in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")]
        if "CMakeLists.txt" in names:
            out.append(os.path.relpath(os.path.join(root, "CMakeLists.txt"), repo))
    return sorted(out)


def source_files(repo):
    try:
        out = subprocess.run(["git", "-C", repo, "ls-files", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, text=True, check=True).stdout.split("\n")
        files = [f for f in out if f.endswith(SOURCE_EXT)]
        if files:
            return sorted(f for f in files if os.path.exists(os.path.join(repo, f)))
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for root, dirs, names in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")]
        for n in names:
            if n.endswith(SOURCE_EXT):
                files.append(os.path.relpath(os.path.join(root, n), repo))
    return sorted(files)


def check(repo):
    layers = parse_layers(os.path.join(repo, "README.md"))
    problems = []
    for f in source_files(repo):
        mine = layer_of(f, layers)
        if mine is None:
            problems.append(f"{f}:1: in no layer of README.md's table (add its folder there)")
            continue
        allowed = set(layers[mine]) | {mine}
        with open(os.path.join(repo, f), encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                quote, inc = m.group(1), m.group(2)
                if inc.startswith("generated/"):
                    continue  # a header generated at build time
                if inc.startswith("."):  # relative: where it really is
                    inc = os.path.normpath(os.path.join(os.path.dirname(f), inc))
                    if inc.startswith(".."):
                        problems.append(f"{f}:{lineno}: includes \"{m.group(2)}\", outside the tree")
                        continue
                elif "/" not in inc:
                    continue  # a file beside it, or a system header
                if quote == "<" and not os.path.exists(os.path.join(repo, inc)):
                    continue  # a system or library header (<nlohmann/json.hpp>)
                theirs = layer_of(inc, layers)
                if theirs is None:
                    if os.path.exists(os.path.join(repo, inc)):
                        problems.append(f"{f}:{lineno}: includes \"{inc}\", which is in no layer")
                    continue
                if theirs not in allowed:
                    problems.append(f"{f}:{lineno}: layer '{mine}' includes \"{m.group(2)}\" of layer '{theirs}', "
                                    f"which it may not use (README.md, Layers: {mine} may use "
                                    f"{', '.join(layers[mine]) or 'nothing'})")
    # Each folder compiles only its own sources (CMake), in its layer.
    for cm in cmake_files(repo):
        folder = os.path.dirname(cm)
        mine = layer_of(cm, layers) if folder else None
        with open(os.path.join(repo, cm), encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                for m in CMAKE_SOURCE.finditer(line.split("#", 1)[0]):
                    path = m.group(2) if m.group(1) != "../" else os.path.normpath(os.path.join(folder, "..", m.group(2)))
                    if not path.startswith(folder + "/") if folder else True:
                        problems.append(f"{cm}:{lineno}: compiles '{path}', a source of another folder "
                                        f"(each folder's CMakeLists.txt builds only its own sources)")
    return problems


def self_test(repo):
    with tempfile.TemporaryDirectory(prefix="heaplab-layers.") as tmp:
        copy = os.path.join(tmp, "repo")
        shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git", "build*", "results"))
        clean = check(copy)
        if clean:
            print("self-test: the unchanged tree already fails:\n" + "\n".join(clean))
            return 1
        plants = [  # (file, line added), each a wrong way across the layers
            ("capture/format/trace_writer.cpp", '#include "replay/plan.h"  // planted: the format may use nothing\n'),
            ("capture/format/trace_reader.cpp", "#include <replay/launch.h>  // planted, angle brackets\n"),
            ("allocators/library.cpp", '#include "../replay/compare.h"  // planted, relative\n'),
            ("common/CMakeLists.txt", "add_library(planted STATIC ${PROJECT_SOURCE_DIR}/replay/plan.cpp)\n"),
        ]
        for path, line in plants:
            with open(os.path.join(copy, path), "a", encoding="utf-8") as fh:
                fh.write(line)
        found = check(copy)
        print(f"self-test: {len(plants)} wrong-way dependencies planted:")
        for p in found:
            print("  " + p)
        caught = [any(p.startswith(path + ":") for p in found) for path, _ in plants]
        ok = all(caught) and len(found) == len(plants)
        print("self-test: " + ("the check fails on each of them, as it must" if ok else f"NOT all caught: {caught}"))
        return 0 if ok else 1


def main(argv):
    args = argv[1:]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if args and args[0] == "--self-test":
        return self_test(args[1] if len(args) > 1 else repo)
    if args and args[0].startswith("-"):
        print(f"check-layers: unknown option '{args[0]}' (usage: check-layers.py [--self-test] [REPO])", file=sys.stderr)
        return 2
    if args:
        repo = args[0]
    try:
        problems = check(repo)
    except ValueError as e:
        print(f"check-layers: error: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    if problems:
        print(f"check-layers: {len(problems)} dependencies against the layer order")
        return 1
    print("check-layers: every include and every folder's sources follow the layer order")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
