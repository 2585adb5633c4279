#!/usr/bin/env python3
"""Holds the tree to the floors of docs/ARCHITECTURE.md ("The house"):
- every source file includes only its own floor's headers and those of the floors below it;
- inside actors/, the rooms are floors too, bottom up (ACTOR_FLOORS), and at most
  MAX_ACTOR_EXCEPTIONS includes may go up, each named in ACTOR_EXCEPTIONS with its reason;
- every CMake target links only libraries of floors below its folder's: a folder stands where
  what it links puts it (the Python and libtorch fronts link troupe_actors, so they stand
  above actors/), not only where its includes do.
Prints each breach and exits 1 if there is one. Run by ctest; by hand:
  tests/layering_check.py [repository root]"""
import pathlib
import re
import sys

# The floors, bottom up, and which floors each may include (by quoted include); a floor
# always includes itself.
ALLOWED = {
    "base": set(),                                   # runtime/base: the CAF-free vocabulary
    "kernels": {"base"},
    "error": {"base"},                               # troupe/error.hpp
    "messages": {"base", "kernels", "error"},
    "public": {"base", "error"},                     # runtime/include/troupe
    "detail": {"base", "error", "public", "messages"},
    "runtime": {"base", "error", "public", "detail", "messages"},
    "actors": {"base", "error", "public", "detail", "messages", "kernels"},
    "fronts": {"base", "error", "public", "detail", "messages", "kernels", "actors"},
    "apps": {"base", "error", "public", "detail", "messages", "kernels", "actors"},
    "examples": {"base", "error", "public"},
    "tests": {"base", "error", "public", "detail", "messages", "kernels", "actors", "apps",
              "fronts"},
}
# System headers a floor may not use: the base and the kernels know nothing of CAF.
FORBIDDEN_SYSTEM = {
    "base": ("caf/", "capnp/", "kj/", "openssl/"),
    "kernels": ("caf/", "capnp/", "kj/", "openssl/"),
    "error": ("capnp/", "kj/", "openssl/"),
    "public": ("capnp/", "kj/", "openssl/"),
    "examples": ("capnp/", "kj/"),
}
# The rooms of actors/, bottom up: a room includes its own floor's and lower floors' headers.
ACTOR_FLOORS = [
    ("records", ["records"]),            # what coordinators write: report, checkpoint file
    ("supervision", ["supervision"]),    # supervisors, failure detection, admission
    ("transport", ["transport"]),        # the bucket channels: in-process, CAF, the data lane
    ("bucket", ["bucket"]),
    ("server", ["server"]),
    ("worker", ["worker"]),
    ("dp collectives", ["dp/collective", "dp/compression"]),
    ("gpu", ["gpu"]),                    # the CUDA twins of bucket/ and dp/collective/
    ("dp trainer", ["dp/trainer"]),
    ("job shell", ["job"]),              # what a coordinator of every mode keeps and does
    ("ps plan", ["ps"]),                 # the parameter service's buckets, batches, evaluations
    ("dp plan", ["dp/plan"]),            # the data-parallel group's generations and steps
    ("coordinator", ["coordinator"]),    # the one coordinator actor: the shell with its plans
    ("dp loops", ["dp/loops"]),
    ("app", ["app"]),                    # the app API: parameter service, app node
    ("launch", ["launch"]),              # run_app: every role of a job
]
# Includes that go up a floor inside actors/: (file, included header) -> why (the same reason
# stands in docs/ARCHITECTURE.md, "The house").
ACTOR_EXCEPTIONS = {}
MAX_ACTOR_EXCEPTIONS = 2
# The floor of each CMake library, for the link check.
TARGET_FLOORS = {
    "troupe_base": "base", "troupe_kernels": "kernels", "troupe_kernels_cuda": "kernels",
    "troupe_messages": "messages", "troupe_runtime": "runtime", "troupe_actors": "actors",
    "troupe_gpu": "actors", "troupe_torch": "fronts", "troupe_native": "fronts",
}
# The floors' order for links (a library of the runtime links only libraries below it).
LINK_ORDER = ["base", "kernels", "messages", "runtime", "actors", "fronts", "apps", "tests"]
SOURCES = (".hpp", ".cpp", ".cu", ".cuh", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)
LINK = re.compile(r"target_link_libraries\(\s*(\S+)([^)]*)\)", re.S)


def base_headers(root: pathlib.Path) -> set:
    return {p.name for p in (root / "runtime/base/troupe").glob("*.hpp")}


def layer_of_troupe_header(name: str, base: set) -> str:
    """The floor of a header included as "troupe/NAME"."""
    if name.startswith("detail/"):
        return "detail"
    if name in base:
        return "base"
    return "error" if name == "error.hpp" else "public"


def layer_of_file(rel: str, base: set) -> str | None:
    parts = rel.split("/")
    if len(parts) < 2:
        return None
    if parts[0] == "runtime":
        if parts[1] == "base":
            return "base"
        if parts[1] == "include":
            return layer_of_troupe_header("/".join(parts[3:]), base)
        return "runtime"
    if parts[0] == "apps":
        if len(parts) > 1 and parts[1] in ("python", "torch"):
            return "fronts"
        return "examples" if len(parts) > 1 and parts[1] == "examples" else "apps"
    if parts[0] in ("kernels", "messages", "actors", "tests"):
        return parts[0]
    return None


def layer_of_include(name: str, including: str, base: set) -> str | None:
    parts = name.split("/")
    if parts[0] == "troupe":
        return layer_of_troupe_header("/".join(parts[1:]), base)
    if parts[0] == "apps" and len(parts) > 1 and parts[1] in ("python", "torch"):
        return "fronts"
    if parts[0] in ("kernels", "messages", "actors", "apps", "tests"):
        return parts[0]
    return including  # a header beside the including file (apps' "fmnist/...", "bench.hpp")


def actor_floor(path: str) -> int | None:
    """The index in ACTOR_FLOORS of a path under actors/ (None: not in a room)."""
    inner = path.split("/", 1)[1] if path.startswith("actors/") else path
    for index, (_, rooms) in enumerate(ACTOR_FLOORS):
        if any(inner == room or inner.startswith(room + "/") for room in rooms):
            return index
    return None


def source_files(root: pathlib.Path):
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("build", ".")) or "/build/" in rel:
            continue
        yield path, rel


def include_problems(root: pathlib.Path, base: set, upward: list):
    for path, rel in source_files(root):
        layer = layer_of_file(rel, base)
        if path.suffix not in SOURCES or layer is None:
            continue
        for kind, name in INCLUDE.findall(path.read_text(errors="replace")):
            if kind == "<":
                if name.startswith(FORBIDDEN_SYSTEM.get(layer, ())):
                    yield f"{rel}: {layer} may not include <{name}>"
                continue
            target = layer_of_include(name, layer, base)
            if target != layer and target not in ALLOWED[layer]:
                yield f'{rel}: {layer} may not include "{name}" ({target})'
            if layer == "actors" and target == "actors":
                yield from actor_problem(rel, name, upward)


def actor_problem(rel: str, name: str, upward: list):
    mine, theirs = actor_floor(rel), actor_floor(name)
    if mine is None:
        yield f'{rel}: in no room of ACTOR_FLOORS (includes "{name}")'
    elif theirs is None:
        yield f'{rel}: includes "{name}", in no room of ACTOR_FLOORS'
    elif theirs > mine:
        upward.append((rel, name))
        if (rel, name) not in ACTOR_EXCEPTIONS:
            yield (f'{rel} ({ACTOR_FLOORS[mine][0]}) may not include "{name}" '
                   f"({ACTOR_FLOORS[theirs][0]}, a floor above)")


def link_problems(root: pathlib.Path, base: set):
    """Each target's troupe libraries against the floor of the folder that builds it."""
    for path, rel in source_files(root):
        if path.name != "CMakeLists.txt":
            continue
        folder_layer = layer_of_file(rel.rsplit("/", 1)[0] + "/x.cpp", base)
        for target, libraries in LINK.findall(path.read_text()):
            layer = TARGET_FLOORS.get(target, folder_layer)
            if layer == "examples":
                layer = "apps"
            if layer not in LINK_ORDER:
                continue
            for library in libraries.split():
                linked = TARGET_FLOORS.get(library)
                if linked and LINK_ORDER.index(linked) > LINK_ORDER.index(layer):
                    yield f"{rel}: {target} ({layer}) may not link {library} ({linked}, above)"


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
    root = root.resolve()
    base = base_headers(root)
    upward = []
    found = list(include_problems(root, base, upward)) + list(link_problems(root, base))
    if len(upward) > MAX_ACTOR_EXCEPTIONS:
        found.append(f"{len(upward)} includes go up a floor inside actors/, at most "
                     f"{MAX_ACTOR_EXCEPTIONS}")
    for line in found:
        print(line)
    print("floors: " + " < ".join(ALLOWED) + "; actors/: " +
          " < ".join(name for name, _ in ACTOR_FLOORS))
    print(f"layering_check: {len(found)} breach(es); {len(upward)} upward include(s) inside "
          f"actors/ (at most {MAX_ACTOR_EXCEPTIONS})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
