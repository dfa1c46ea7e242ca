#!/usr/bin/env python3
"""Checks that the repository's Markdown files point only at what exists.

For every tracked *.md file:
  - each Markdown link [text](target) that is not a URL must name a file or
    folder of the repository (relative to the Markdown file), and its
    #anchor, if any, a heading of the file it names;
  - each `code span` that looks like a repository path (it contains a slash
    and starts with a top-level folder of the repository, or it names a .md
    file) must exist; {a,b} and * are expanded as the shell would.
Nothing may point outside the repository.

Usage: tools/check-doc-links.py [ROOT]   (ROOT: the repository, default ..)
Exit status 0 when every reference resolves, else 1 (each bad one listed).
"""

import glob
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(
    sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^[A-Za-z0-9_.{},*/-]+$")
HEADING = re.compile(r"^#+\s+(.*?)\s*#*\s*$")


def repository_files():
    """The files git tracks or would add (not ignored); outside a checkout,
    every file but those of build folders."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-co", "--exclude-standard"],
                             check=True, capture_output=True, text=True).stdout
        return sorted(line for line in out.splitlines() if line)
    except (OSError, subprocess.CalledProcessError):
        files = []
        for folder, subfolders, names in os.walk(ROOT):
            subfolders[:] = [d for d in subfolders if not d.startswith((".git", "build"))]
            files += [os.path.relpath(os.path.join(folder, n), ROOT) for n in names]
        return sorted(files)


def expand_braces(text):
    match = re.search(r"\{([^{}]*)\}", text)
    if not match:
        return [text]
    head, tail = text[:match.start()], text[match.end():]
    return [x for alt in match.group(1).split(",") for x in expand_braces(head + alt + tail)]


def inside(path):
    return os.path.commonpath([ROOT, os.path.abspath(path)]) == ROOT


def exists(path):
    return inside(path) and (glob.glob(path) if "*" in path else os.path.exists(path))


def slug(heading):
    """The anchor GitHub gives a heading."""
    heading = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


def anchors(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    result, fenced = set(), False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            result.add(slug(match.group(1)))
    return result


def strip_fences(text):
    """The text with fenced code blocks blanked (line numbers kept)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return out


def check(markdown, top_level):
    errors = []
    here = os.path.dirname(os.path.join(ROOT, markdown))
    with open(os.path.join(ROOT, markdown), encoding="utf-8") as f:
        lines = strip_fences(f.read())
    for number, line in enumerate(lines, 1):
        where = f"{markdown}:{number}"
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = os.path.normpath(os.path.join(here, path)) if path else os.path.join(
                ROOT, markdown)
            if not exists(file):
                errors.append(f"{where}: link to {target}: no such file in the repository")
            elif anchor and file.endswith(".md") and anchor not in anchors(file):
                errors.append(f"{where}: link to {target}: no heading #{anchor} there")
        for span in CODE.findall(line):
            span = span.rstrip(".,:;")
            if "/" not in span or not PATH.match(span) or span.startswith("/"):
                continue
            first = span.split("/")[0]
            if first not in top_level and not span.endswith(".md") and first != "..":
                continue
            for p in expand_braces(span):
                if not any(exists(os.path.normpath(os.path.join(base, p)))
                           for base in (ROOT, here)):
                    errors.append(f"{where}: `{span}`: {p} is not in the repository")
    return errors


def main():
    every = repository_files()
    top_level = {f.split("/")[0] for f in every}
    files = [f for f in every if f.endswith(".md")]
    if not files:
        # A wrong ROOT (or --help) would otherwise pass, having checked nothing.
        print(f"check-doc-links: no Markdown files under {ROOT}; "
              "usage: tools/check-doc-links.py [ROOT]")
        return 2
    errors = [e for f in files for e in check(f, top_level)]
    for e in errors:
        print(e)
    print(f"check-doc-links: {len(files)} Markdown files, "
          f"{len(errors)} references that do not resolve")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
