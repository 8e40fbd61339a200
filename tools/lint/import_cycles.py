#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Fails on a circle of `crate::` imports between the modules of src/ferry.

Each top-level module of the crate (a file `src/ferry/NAME.rs`, with its
folder `src/ferry/NAME/` if it has one) is a node; `NAME` depends on `OTHER`
when its code names `crate::OTHER` (in a `use` or in a path), and on the
crate root when it names a root item (`crate::Item`); the root depends on
the modules it names. (Submodules of a folder reach each other through
`super::`, inside their node.) The safe wrappers of rust/ (bound
in with `#[path]`) are leaves: they are left out. Tests (`#[cfg(...KUNIT...)]`
modules) count too, as they are part of the module.

Prints every module's dependencies and each circle found (a strongly
connected group of modules, with one path around it), and exits 1 if there
is any.

usage: import_cycles.py [SRC_DIR]
"""
import os
import re
import sys


def strip_comments(text):
    """The code without comments and string contents (which may name
    `crate::` in prose)."""
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def use_trees(code):
    """Every `use crate::...;` statement's tree, braces included."""
    for m in re.finditer(r'\buse\s+crate::', code):
        end = code.index(';', m.end())
        yield code[m.end():end]


def first_names(tree):
    """The first path segments of a use tree: `a::b` -> a, `{a, b::c}` -> a, b."""
    tree = tree.strip()
    if tree.startswith('{'):
        depth, part, names = 0, '', []
        for ch in tree[1:-1] if tree.endswith('}') else tree[1:]:
            if ch == '{':
                depth += 1
            elif ch == '}':
                depth -= 1
            if ch == ',' and depth == 0:
                names += first_names(part)
                part = ''
            else:
                part += ch
        return names + first_names(part) if part.strip() else names
    m = re.match(r'[A-Za-z_][A-Za-z0-9_]*', tree)
    return [m.group(0)] if m else []


def module_deps(src):
    """{module: set of modules it names} for the crate's own modules."""
    mods = {}
    for f in sorted(os.listdir(src)):
        if f.endswith('.rs'):
            mods[f[:-3]] = [os.path.join(src, f)]
    for name in mods:
        d = os.path.join(src, name)
        if os.path.isdir(d):
            for root, _, files in os.walk(d):
                mods[name] += [os.path.join(root, f) for f in sorted(files) if f.endswith('.rs')]
    # The crate root (the file that declares the modules) and the modules it
    # binds in from rust/ with #[path]: leaves, but for the root's own items.
    root = next((n for n, f in mods.items()
                 if re.search(r'^module!', open(f[0], encoding='utf-8').read(), re.M)), None)
    wrappers = set()
    if root:
        with open(mods[root][0], encoding='utf-8') as fh:
            wrappers = set(re.findall(r'#\[path = "[^"]+"\]\s*(?:pub\s+)?mod (\w+);', fh.read()))
    deps = {}
    for name, files in mods.items():
        found = set()
        for path in files:
            with open(path, encoding='utf-8') as fh:
                code = strip_comments(fh.read())
            named = set()
            for tree in use_trees(code):
                named.update(first_names(tree))
            named.update(re.findall(r'(?<![\w:])crate::([A-Za-z_][A-Za-z0-9_]*)', code))
            if name == root:
                # The root names its modules by relative paths.
                named.update(re.findall(r'(?<![\w:])([a-z_][a-z0-9_]*)::', code))
            for x in named:
                if x in mods:
                    found.add(x)
                elif root and x not in wrappers and name != root:
                    # An item of the crate root (`crate::Item`).
                    found.add(root)
        deps[name] = sorted(x for x in found if x != name)
    return deps


def cycles(deps):
    """Strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in deps[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(deps):
        if v not in index:
            visit(v)
    return out


def path_around(deps, group):
    """One circle through the group's first module, for the message."""
    start = group[0]
    members = set(group)
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in deps[v]:
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return group


def self_test():
    """The lint finds a circle through `use` trees, paths, a submodule
    folder and the crate root's items, and none in a layered tree."""
    import tempfile
    cases = {
        # (files, circle expected)
        'layered': ({'root.rs': 'module! {}\nmod a;\nmod b;\nfn f() { a::x(); }\n',
                     'a.rs': 'use crate::b::Y;\n',
                     'b.rs': '// crate::a::X in a comment\nconst S: &str = "crate::a";\n'},
                    False),
        'use tree': ({'root.rs': 'mod a;\nmod b;\n',
                      'a.rs': 'use crate::{\n    b::{self, Y},\n};\n',
                      'b.rs': 'fn f() { crate::a::x() }\n'}, True),
        # (A module with children of its own is not taken for the root.)
        'folder': ({'root.rs': 'module! {}\nmod a;\nmod b;\n',
                    'a.rs': 'mod inner;\n',
                    'a/inner.rs': 'use crate::b::Y;\n',
                    'b.rs': 'use crate::a::X;\n'}, True),
        'root item': ({'root.rs': 'module! {}\nmod a;\nstruct G;\nfn f() { a::x(); }\n',
                       'a.rs': 'use crate::G;\n'}, True),
    }
    ok = True
    for what, (files, want) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            for name, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, name)), exist_ok=True)
                with open(os.path.join(d, name), 'w', encoding='utf-8') as fh:
                    fh.write(text)
            got = bool(cycles(module_deps(d)))
        if got != want:
            print(f'import_cycles self-test "{what}": circle found {got}, expected {want}')
            ok = False
    return ok


def main():
    if not self_test():
        return 2
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), '..', '..', 'src', 'ferry')
    deps = module_deps(src)
    for name in sorted(deps):
        print(f'{name}: {" ".join(deps[name]) or "-"}')
    found = cycles(deps)
    for group in found:
        print(f'circle: {" -> ".join(path_around(deps, group))} '
              f'(modules in it: {", ".join(group)})')
    if found:
        print(f'import_cycles: {len(found)} circle(s) of crate:: imports in src/ferry')
        return 1
    print('import_cycles: no circle of crate:: imports in src/ferry')
    return 0


if __name__ == '__main__':
    sys.exit(main())
