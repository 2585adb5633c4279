#!/usr/bin/env python3
"""Holds every source file to the include rules of docs/ARCHITECTURE.md ("Layers"): a folder
may include its own headers and those of the layers below it, never above. Prints each
include that runs against the rules and exits 1 if there is one. Run by ctest; by hand:
  tests/layering_check.py [repository root]"""
import pathlib
import re
import sys

# The plain-C++ vocabulary below everything (runtime/base/ defines it; no CAF).
BASE_HEADERS = {"errc.hpp", "vector_clock.hpp", "log.hpp", "values.hpp", "random.hpp"}

# Which layers each layer may include (by quoted include); a layer always includes itself.
ALLOWED = {
    "base": set(),
    "kernels": {"base"},
    "messages": {"base", "kernels", "error"},
    "error": {"base"},
    "public": {"base", "error"},
    "detail": {"base", "error", "public", "messages"},
    "runtime": {"base", "error", "public", "detail", "messages"},
    "actors": {"base", "error", "public", "detail", "messages", "kernels"},
    "apps": {"base", "error", "public", "detail", "messages", "kernels", "actors"},
    "examples": {"base", "error", "public"},
    "python": {"base", "error", "public", "kernels"},  # troupe.optim.DASH binds the kernels
    "tests": {"base", "error", "public", "detail", "messages", "kernels", "actors", "apps"},
}
# System headers a layer may not use: the base and the kernels know nothing of CAF.
FORBIDDEN_SYSTEM = {
    "base": ("caf/", "capnp/", "kj/", "openssl/"),
    "kernels": ("caf/", "capnp/", "kj/", "openssl/"),
    "error": ("capnp/", "kj/", "openssl/"),
    "public": ("capnp/", "kj/", "openssl/"),
    "examples": ("capnp/", "kj/"),
}
SOURCES = (".hpp", ".cpp", ".cu", ".cuh", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)


def layer_of_troupe_header(name: str) -> str:
    """The layer of a header under runtime/include/troupe/, named from there ("detail/x.hpp")."""
    if name.startswith("detail/"):
        return "detail"
    if name in BASE_HEADERS:
        return "base"
    return "error" if name == "error.hpp" else "public"


def layer_of_file(rel: str) -> str | None:
    parts = rel.split("/")
    if parts[0] == "runtime":
        if parts[1] == "base":
            return "base"
        if parts[1] == "include":
            return layer_of_troupe_header("/".join(parts[3:]))
        return "python" if parts[1] == "python" else "runtime"
    if parts[0] == "apps":
        return "examples" if len(parts) > 1 and parts[1] == "examples" else "apps"
    if parts[0] in ("kernels", "messages", "actors", "tests"):
        return parts[0]
    return None


def layer_of_include(name: str, including: str) -> str | None:
    parts = name.split("/")
    if parts[0] == "troupe":
        return layer_of_troupe_header("/".join(parts[1:]))
    if parts[0] in ("kernels", "messages", "actors", "apps", "tests"):
        return parts[0]
    return including  # a header beside the including file (apps' "fmnist/...", "bench.hpp")


def problems(root: pathlib.Path):
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.suffix not in SOURCES or rel.startswith(("build", ".")) or "/build/" in rel:
            continue
        layer = layer_of_file(rel)
        if layer is None:
            continue
        for kind, name in INCLUDE.findall(path.read_text(errors="replace")):
            if kind == "<":
                if name.startswith(FORBIDDEN_SYSTEM.get(layer, ())):
                    yield f"{rel}: {layer} may not include <{name}>"
                continue
            target = layer_of_include(name, layer)
            if target != layer and target not in ALLOWED[layer]:
                yield f'{rel}: {layer} may not include "{name}" ({target})'


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
    found = list(problems(root.resolve()))
    for line in found:
        print(line)
    print(f"layering_check: {len(found)} include(s) against the rules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
