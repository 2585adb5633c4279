#!/usr/bin/env python3
"""Checks every relative link of the documentation: README.md and docs/**/*.md. A link
[text](target) (or an image, or a reference definition "[name]: target") outside fenced code
blocks and inline code must name a file or directory that exists, relative to the file that
links; a "#fragment" into a .md file (or "#fragment" alone, into the linking file) must name
a heading there, by GitHub's anchor rules. Links with a scheme (https:, mailto:, ...) are not
checked. Prints each broken link as "file:line: broken link 'target' (reason)" and exits 1 if
there is one; otherwise prints one line and exits 0. Standard library only:
  tests/doc_links_check.py [repository root]"""
import pathlib
import re
import sys
import urllib.parse

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^\s{0,3}(#{1,6})(?:\s+(.*?))?\s*$")
SETEXT_UNDERLINE = re.compile(r"^\s{0,3}(=+|-+)\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target); target may be <...> and may have a "title" after it.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
                         r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def doc_files(root: pathlib.Path) -> list[pathlib.Path]:
    files = []
    if (root / "README.md").is_file():
        files.append(root / "README.md")
    docs = root / "docs"
    if docs.is_dir():
        files.extend(sorted(p for p in docs.rglob("*.md") if p.is_file()))
    return files


def prose_lines(text: str):
    """(line number, line) for every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                continue
            yield number, line
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                and line.strip() == match.group(1):
            fence = None


def render_heading(text: str) -> str:
    """The heading's text as GitHub shows it: code spans keep their text, links their label,
    emphasis markers go."""
    text = re.sub(r"\s+#+\s*$", "", text)                 # a closing sequence of #s
    parts = []
    for index, part in enumerate(INLINE_CODE.split(text)):
        # split() gives text, then per code span its backticks and its content
        if index % 3 == 0:
            part = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", part)
            part = re.sub(r"<[^>]+>", "", part)                   # inline HTML tags
            part = re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", part)  # emphasis, not snake_case
            parts.append(part)
        elif index % 3 == 2:
            parts.append(part.strip())
    return "".join(parts).strip()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, drop punctuation but '-' and '_', spaces
    to '-'."""
    text = render_heading(heading).lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors_of(path: pathlib.Path, cache: dict) -> set[str]:
    if path in cache:
        return cache[path]
    anchors, seen = set(), {}
    previous = None
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        heading = None
        match = ATX_HEADING.match(line)
        if match and match.group(2) is not None:
            heading = match.group(2)
        elif previous is not None and previous.strip() and SETEXT_UNDERLINE.match(line) \
                and not ATX_HEADING.match(previous):
            heading = previous.strip()
        if heading is not None:
            base = slug(heading)
            count = seen.get(base, 0)
            seen[base] = count + 1
            anchors.add(base if count == 0 else f"{base}-{count}")
        anchors.update(a for a in HTML_ANCHOR.findall(line))
        previous = line
    cache[path] = anchors
    return anchors


def links_of(path: pathlib.Path):
    """(line number, target) for every link outside code."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        definition = REFERENCE_DEFINITION.match(line)
        if definition:
            yield number, definition.group(1)
            continue
        line = INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)
        for match in INLINE_LINK.finditer(line):
            yield number, match.group(1)


def check(root: pathlib.Path, path: pathlib.Path, target: str, cache: dict):
    """None when the link resolves, else the reason it does not."""
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1]
    if not target:
        return "empty target"
    if SCHEME.match(target) or target.startswith("//"):
        return None
    file_part, _, fragment = target.partition("#")
    file_part = urllib.parse.unquote(file_part.split("?", 1)[0])
    if file_part:
        resolved = (root / file_part.lstrip("/")) if file_part.startswith("/") \
            else (path.parent / file_part)
        if not resolved.exists():
            return "no such file or directory"
    else:
        resolved = path
    if fragment and resolved.is_file() and resolved.suffix.lower() == ".md":
        anchor = urllib.parse.unquote(fragment).lower()
        if anchor not in anchors_of(resolved, cache):
            return f"no heading '#{fragment}' in {resolved.relative_to(root)}"
    return None


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    files = doc_files(root)
    if not files:
        print(f"no README.md or docs/*.md under {root}")
        return 1
    cache, checked, broken = {}, 0, 0
    for path in files:
        for number, target in links_of(path):
            checked += 1
            reason = check(root, path, target, cache)
            if reason is not None:
                broken += 1
                print(f"{path.relative_to(root)}:{number}: broken link '{target}' ({reason})")
    if broken:
        print(f"{broken} of {checked} links in {len(files)} files are broken")
        return 1
    print(f"all {checked} links in {len(files)} files resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
