#!/usr/bin/env python3
"""Print which modules each module of the product crate (src/) uses, and report import circles.

    scripts/module-map.py [--quiet] [--dir DIR]... [SRC_DIR]
    scripts/module-map.py --self-test     (the checker checked on small made-up crates)

Every source file is one module (a file declared with `#[path]` or inside another module's directory counts as
its own). A dependency is any path that names another module of the crate: `use crate::a::b`, `use super::x`,
`super::x::f()` written inline, or a child module named by the module that declares it. Inline modules in a
file (`mod tests { ... }`) are counted as part of the file.

A circle is a cycle of dependencies among the files of one directory (e.g. messaging/manager.rs uses poll.rs,
which uses manager.rs): the kind that makes a directory impossible to read in any order. Circles that cross
directories are not reported (a directory is read as a whole); with --dir (a directory under SRC_DIR, e.g.
`--dir messaging`, repeatable) only those directories are checked. The exit status is 1 when there is a circle,
2 on a usage error; the map goes to stdout (--quiet leaves it out), the circles to stderr.
"""

import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(text):
    """The source with comments, string and char literals blanked out (newlines kept), so that paths inside
    them are not mistaken for code."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif re.match(r'b?r#*"', text[i:i + 8]) and (i == 0 or not re.match(r"[A-Za-z0-9_]", text[i - 1])):
            m = re.match(r'b?r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append("\n" * text.count("\n", i, j) + '""')
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i)
                          and (i == 0 or not re.match(r"[A-Za-z0-9_]", text[i - 1]))):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append("\n" * text.count("\n", i, j) + '""')
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a): only the former is blanked.
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append("' '")
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(' + IDENT
                       + r")\s*;")
INLINE_MOD = re.compile(r"\bmod\s+(" + IDENT + r")\s*\{")


class Module:
    def __init__(self, path, file, children_dir):
        self.path = path  # ["crate", "messaging", "manager"]
        self.file = file  # src/messaging/manager.rs
        self.children_dir = children_dir  # where `mod x;` looks for x.rs / x/mod.rs
        self.code = ""
        self.children = {}  # name -> Module


def load_modules(src):
    """The crate's modules from lib.rs down, following `mod x;` (and `#[path]`) as rustc does."""
    modules = {}
    root = Module(["crate"], os.path.join(src, "lib.rs"), src)

    def visit(module):
        with open(module.file, encoding="utf-8") as f:
            raw = f.read()
        module.code = strip_comments_and_strings(raw)
        modules[tuple(module.path)] = module
        # #[path] attributes live in the raw text (the path is a string literal, blanked in `code`).
        explicit = {name: rel for rel, name in PATH_ATTR.findall(raw)}
        for m in re.finditer(r"(?:pub(?:\([^)]*\))?\s+)?\bmod\s+(" + IDENT + r")\s*;", module.code):
            name = m.group(1)
            if name in explicit:
                file = os.path.normpath(os.path.join(os.path.dirname(module.file), explicit[name]))
                children_dir = os.path.join(os.path.dirname(file), name)
            else:
                flat = os.path.join(module.children_dir, name + ".rs")
                file = flat if os.path.exists(flat) else os.path.join(module.children_dir, name, "mod.rs")
                children_dir = os.path.join(module.children_dir, name)
            if not os.path.exists(file):
                continue  # a cfg'd-out module, or one this script cannot place
            child = Module(module.path + [name], file, children_dir)
            module.children[name] = child
            visit(child)

    visit(root)
    return modules


USE_STMT = re.compile(r"\buse\s+([^;]+);")
INLINE_PATH = re.compile(r"(?<![A-Za-z0-9_:])((?:" + IDENT + r")(?:\s*::\s*" + IDENT + r")+)")


def expand_use_tree(tree):
    """`a::{b, c::{d, self}}` -> ["a::b", "a::c::d", "a::c"]."""
    tree = re.sub(r"\s+as\s+" + IDENT, "", tree)
    tree = re.sub(r"\s+", "", tree)

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def walk(prefix, s):
        i = s.find("{")
        if i < 0:
            path = prefix + s
            if path.endswith("::self"):
                path = path[: -len("::self")]
            return [path]
        head = s[:i]
        inner = s[i + 1: s.rfind("}")]
        result = []
        for part in split_top(inner):
            result.extend(walk(prefix + head, part))
        return result

    return [p for p in walk("", tree) if p]


def absolute(module, path, base=None):
    """A use path as a list of segments from `crate`, or None when it is not a path into this crate."""
    segments = path.replace(" ", "").split("::")
    if segments[0] == "crate":
        return ["crate"] + segments[1:]
    if segments[0] in ("super", "self"):
        target = list(base or module.path)
        while segments and segments[0] in ("super", "self"):
            if segments.pop(0) == "super":
                target.pop()
        return target + segments
    if segments[0] in module.children:
        return module.path + segments
    return None


def imported_names(module, modules):
    """The names a module's top-level `use` statements bring in, each with the absolute path it stands for."""
    names = {}
    spans = inline_module_spans(module.code)
    for m in USE_STMT.finditer(module.code):
        if any(start <= m.start() <= end for start, end, _ in spans):
            continue
        for p in expand_use_tree(re.sub(r"\s+as\s+", " as ", m.group(1))):
            target = absolute(module, p)
            if target and target[-1] != "*":
                names[target[-1]] = target
    return names


def inline_module_spans(code):
    """(start, end, name) of each `mod name { ... }` in a file, to resolve `super::` inside them."""
    spans = []
    for m in INLINE_MOD.finditer(code):
        depth, j = 0, m.end() - 1
        while j < len(code):
            if code[j] == "{":
                depth += 1
            elif code[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        spans.append((m.start(), j, m.group(1)))
    return spans


def resolve(module, offset, path, spans, modules):
    """The crate module a path names (the longest module prefix), or None when it is not a crate path."""
    base = list(module.path)
    # Inside `mod tests { ... }`, `super::` is the file's own module.
    for start, end, name in spans:
        if start <= offset <= end:
            base = base + [name]
    target = absolute(module, path, base)
    return longest_module(target, modules) if target else None


def longest_module(target, modules, hops=0):
    """The module that defines what `target` names: its longest module prefix, following a name the prefix only
    imports (`super::Context` where the parent has `use session::Context`) to where it comes from."""
    for k in range(len(target), 0, -1):
        owner = modules.get(tuple(target[:k]))
        if owner is None:
            continue
        if k < len(target) and target[k] in owner.imports and hops < 8:
            source = owner.imports[target[k]] + target[k + 1:]
            return longest_module(source, modules, hops + 1) or owner
        return owner
    return None


def dependencies(module, modules):
    """The files of the crate modules that `module`'s code names."""
    code = module.code
    spans = inline_module_spans(code)
    found = set()
    paths = []
    for m in USE_STMT.finditer(code):
        reexport = re.search(r"\bpub(\([^)]*\))?\s+$", code[max(0, m.start() - 20): m.start()])
        for p in expand_use_tree(m.group(1)):
            # A re-export (`pub use child::Thing`) is the module's interface, not something its code needs,
            # unless the code also uses the name.
            name = p.split("::")[-1]
            if reexport and not re.search(r"\b" + re.escape(name) + r"\b", code[: m.start()] + code[m.end():]):
                continue
            paths.append((m.start(), p))
    used_spans = [(m.start(), m.end()) for m in USE_STMT.finditer(code)]
    for m in INLINE_PATH.finditer(code):
        if any(s <= m.start() < e for s, e in used_spans):
            continue
        paths.append((m.start(), m.group(1)))
    for offset, p in paths:
        target = resolve(module, offset, p, spans, modules)
        # A path into this file (its inline `mod tests`, say) is no dependency; one to a parent through
        # `super::` is.
        if target is not None and target.file != module.file:
            found.add(target.file)
    return found


def circles_in(files, edges):
    """Strongly connected components of size > 1 (Tarjan), each a list of files."""
    index, low, stack, on, result = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in files:
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for v in sorted(files):
        if v not in index:
            strong(v)
    return result


def one_cycle(component, edges):
    """A shortest path round the component from its first file, to show which imports close the circle."""
    members = set(component)
    start = component[0]
    frontier, seen = [[start]], {start}
    while frontier:
        nxt = []
        for route in frontier:
            for w in sorted(edges.get(route[-1], ())):
                if w == start and len(route) > 1:
                    return route + [start]
                if w in members and w not in seen:
                    seen.add(w)
                    nxt.append(route + [w])
        frontier = nxt
    return component


def main(argv):
    quiet, dirs, args = False, [], list(argv)
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    while args:
        arg = args.pop(0)
        if arg == "--quiet":
            quiet = True
        elif arg == "--dir" and args:
            dirs.append(args.pop(0).strip("/"))
        elif not arg.startswith("-"):
            src = arg
        else:
            print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
            return 2
    src = os.path.normpath(src)
    modules = load_modules(src)
    for module in modules.values():
        module.imports = imported_names(module, modules)
    edges = {}
    for module in modules.values():
        edges.setdefault(module.file, set()).update(dependencies(module, modules))

    def rel(f):
        return os.path.relpath(f, src)

    if not quiet:
        for file in sorted(edges):
            deps = sorted(rel(d) for d in edges[file])
            print(f"{rel(file)}: {', '.join(deps) if deps else '-'}")

    by_dir = {}
    for file in edges:
        by_dir.setdefault(os.path.dirname(file), set()).add(file)
    found = []
    for directory in sorted(by_dir):
        if dirs and os.path.relpath(directory, src) not in dirs:
            continue
        for component in circles_in(by_dir[directory], edges):
            found.append((component, one_cycle(component, edges)))
    for component, cycle in found:
        print(f"circle among {', '.join(rel(f) for f in component)}: {' -> '.join(rel(f) for f in cycle)}",
              file=sys.stderr)
    if found:
        print(f"module-map: {len(found)} import circle(s) within a directory", file=sys.stderr)
        return 1
    where = ", ".join(d + "/" for d in dirs) if dirs else "any directory"
    print(f"module-map: {len(edges)} modules, no import circles within {where}", file=sys.stderr)
    return 0


def self_test():
    """Checks the checker on small made-up crates: the circles it must find, and the dependencies that are not
    circles. Returns the number of failures."""
    import tempfile

    cases = [
        # (name, files, circle expected)
        ("siblings through a helper", {
            "lib.rs": "mod m;",
            "m/mod.rs": "mod a;\nmod b;",
            "m/a.rs": "fn f() { super::b::g(); }",
            "m/b.rs": "use super::a::Thing;",
        }, True),
        ("crate:: paths and groups", {
            "lib.rs": "mod m;",
            "m/mod.rs": "mod a;\nmod b;\nmod c;",
            "m/a.rs": "use crate::m::{b::X, c};",
            "m/b.rs": "use crate::m::c::Y;",
            "m/c.rs": "use crate::m::a::{self as z};",
        }, True),
        ("a #[path] child that imports its parent", {
            "lib.rs": "mod m;",
            "m/mod.rs": "mod a;",
            "m/a.rs": '#[path = "a_part.rs"]\nmod part;\nfn f() { part::g(); }',
            "m/a_part.rs": "use super::Thing;",
        }, True),
        ("a chain, tests, comments and strings", {
            "lib.rs": "mod m;",
            "m/mod.rs": "mod a;\nmod b;",
            "m/a.rs": "use super::b::X;\n#[cfg(test)]\nmod tests { use super::*; }",
            "m/b.rs": '// super::a::f\nconst S: &str = "super::a::f";\nconst R: &str = r#"super::a"#;',
        }, False),
        ("a re-export in mod.rs is not a use", {
            "lib.rs": "mod m;",
            "m/mod.rs": "mod a;\npub use a::Thing;\npub struct Settings;",
            "m/a.rs": "use super::Settings;\npub struct Thing(Settings);",
        }, False),
        ("a name imported by the parent leads to where it is defined", {
            "lib.rs": "mod m;",
            "m/mod.rs": "mod a;\nmod b;\npub(crate) use a::Thing;",
            "m/a.rs": "pub struct Thing;\nfn g() { super::b::h(); }",
            "m/b.rs": "fn h() {}\nuse super::Thing;",
        }, True),
        ("circles across directories are not reported", {
            "lib.rs": "mod m;\nmod n;",
            "m/mod.rs": "use crate::n::X;",
            "n/mod.rs": "use crate::m::Y;",
        }, False),
    ]
    failures = 0
    for name, files, expected in cases:
        with tempfile.TemporaryDirectory() as src:
            for rel_path, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(src, rel_path)), exist_ok=True)
                with open(os.path.join(src, rel_path), "w", encoding="utf-8") as f:
                    f.write(text + "\n")
            with open(os.devnull, "w") as devnull:
                saved, sys.stderr = sys.stderr, devnull
                try:
                    found = main(["--quiet", src]) == 1
                finally:
                    sys.stderr = saved
        if found != expected:
            failures += 1
            print(f"self-test: {name}: circle {'not ' if expected else ''}found, expected the opposite",
                  file=sys.stderr)
    print(f"module-map self-test: {len(cases) - failures} of {len(cases)} cases right", file=sys.stderr)
    return failures


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(1 if self_test() else 0)
    sys.exit(main(sys.argv[1:]))
