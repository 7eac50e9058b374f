#!/usr/bin/env python3
"""Fails when a source file includes a module of its own layer or above.

The layers are the table under "## Layers" in docs/ARCHITECTURE.md: one row per layer, lowest
first, naming its modules (folders under src/, plus tools/). A file may include its own module
and any module of a lower layer; anything else is an upward (or sideways) edge and is reported
as `file:line: includes "x/y.h": module 'a' (layer N) may not include 'x' (layer M)`.

Usage: check_layers.py [--root REPO]    (exit 0: clean; 1: violations; 2: bad table or tree)
"""

import argparse
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|")
MODULE = re.compile(r"`([a-z0-9_]+)`")


def read_layers(doc):
    """Returns {module: layer} from the table that follows the '## Layers' heading."""
    layers = {}
    in_section = False
    for line in doc.read_text().splitlines():
        if line.startswith("## "):
            in_section = line.strip() == "## Layers"
            continue
        if not in_section:
            continue
        row = ROW.match(line)
        if not row:
            continue
        for module in MODULE.findall(row.group(2)):
            if module in layers:
                raise ValueError(f"{doc}: module '{module}' is in two layers")
            layers[module] = int(row.group(1))
    if not layers:
        raise ValueError(f"{doc}: no '## Layers' table with rows '| N | `module` ... |'")
    return layers


def module_of(path, root):
    """The module a file belongs to: its first folder under src/, or 'tools'."""
    rel = path.relative_to(root)
    if rel.parts[0] == "src":
        return rel.parts[1]
    return rel.parts[0]


def included_module(include, root):
    """The module an include names, or None for a public header or a same-folder include."""
    parts = include.split("/")
    if len(parts) == 1:
        return None
    if (root / "src" / include).exists():
        return parts[0]
    if (root / "include" / include).exists():
        return None
    return parts[0]


def check(root):
    layers = read_layers(root / "docs" / "ARCHITECTURE.md")
    violations = []
    files = sorted(p for folder in ("src", "tools") for p in (root / folder).rglob("*")
                   if p.suffix in (".h", ".cc", ".c"))
    for path in files:
        module = module_of(path, root)
        if module not in layers:
            violations.append(f"{path.relative_to(root)}: module '{module}' is not in the "
                              "layer table of docs/ARCHITECTURE.md")
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target = included_module(match.group(1), root)
            if target is None or target == module:
                continue
            if target not in layers:
                violations.append(f"{path.relative_to(root)}:{number}: includes "
                                  f"\"{match.group(1)}\": module '{target}' is not in the table")
            elif layers[target] >= layers[module]:
                violations.append(
                    f"{path.relative_to(root)}:{number}: includes \"{match.group(1)}\": module "
                    f"'{module}' (layer {layers[module]}) may not include '{target}' "
                    f"(layer {layers[target]})")
    return violations


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    try:
        violations = check(args.root.resolve())
    except (OSError, ValueError) as error:
        print(f"check_layers: error: {error}", file=sys.stderr)
        return 2
    for violation in violations:
        print(violation)
    if violations:
        print(f"check_layers: {len(violations)} include(s) against the layer table", file=sys.stderr)
        return 1
    print("check_layers: every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
