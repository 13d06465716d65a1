#!/usr/bin/env python3
"""Checks the links of the manual: README.md and docs/**/*.md.

    tests/docs/check_links.py [REPO]      (CTest txmq_docs_links; REPO defaults to this checkout)

For every Markdown file it checks
- each relative link and image, [text](path) or [ref]: path: the file or folder exists;
- each anchor, [text](#anchor) or [text](page.md#anchor): the page has a heading with that
  slug, made by GitHub's rules (lower case, punctuation dropped, spaces to hyphens, -1, -2, ...
  for repeats), or an HTML id= / name=;
- each path of the tree cited as code, `tests/sqs/hostile.py` or `scripts/fault --soak` (the
  first word is checked; `file.cc:function` is checked as file.cc, `cluster.{h,cc}` as both),
  when its first folder is one of the repository's: it exists;
- each docs/... .md page named in plain text: it exists.
Links to other sites (http:, https:, mailto:) are not fetched. Fenced code blocks are skipped.

Before checking, it checks itself on a small tree with one error of each kind and fails unless
it reports exactly those. Exit status: 0 when every link holds, 1 otherwise (each broken link
printed as FILE:LINE: what).
"""

import os
import re
import sys
import tempfile
import unicodedata

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<[^>]*\b(?:id|name)\s*=\s*\"([^\"]+)\"")
PATH_WORD = re.compile(r"^[A-Za-z0-9_.\-/{},*+]+$")
PLAIN_DOCS_PAGE = re.compile(r"(?<![\w/.\-])(docs/[\w./\-]+?\.md)\b")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*:")


def slug(heading):
    """The anchor GitHub gives a heading's text (github-slugger's rule)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    kept = []
    for c in text.lower():
        if c in " -_" or unicodedata.category(c)[0] in "LMN":
            kept.append(c)
    return "".join(kept).replace(" ", "-")


def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            m = FENCE.match(line)
            if m:
                if fence is None:
                    fence = m.group(1)
                elif line.strip().startswith(fence):
                    fence = None
                continue
            if fence is None:
                yield number, line


def anchors_of(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        for _, line in prose_lines(path):
            for name in HTML_ANCHOR.findall(line):
                found.add(name)
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def expand_braces(word):
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    out = []
    for choice in m.group(1).split(","):
        out += expand_braces(word[: m.start()] + choice + word[m.end():])
    return out


def code_path_exists(root, word):
    import glob

    for candidate in expand_braces(word):
        full = os.path.join(root, candidate)
        if "*" in candidate:
            if not glob.glob(full):
                return False
        elif not os.path.exists(full):
            return False
    return True


def check_file(root, path, roots):
    """The broken links of one page, as (line, message)."""
    problems = []
    here = os.path.dirname(path)
    for number, line in prose_lines(path):
        spans = [m.group(2).strip() for m in CODE_SPAN.finditer(line)]
        text = CODE_SPAN.sub("", line)

        targets = INLINE_LINK.findall(text)
        m = REFERENCE_DEF.match(text)
        if m:
            targets.append(m.group(1))
        for target in targets:
            if not target or SCHEME.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            target_path = os.path.normpath(os.path.join(here, file_part)) if file_part else path
            if not os.path.exists(target_path):
                problems.append((number, f"link to a missing file: {target}"))
                continue
            if anchor and target_path.endswith(".md") and os.path.isfile(target_path):
                if anchor not in anchors_of(target_path):
                    problems.append((number, f"link to a missing anchor: {target}"))

        for span in spans:
            words = span.split()
            if not words:
                continue
            word = re.sub(r":[^/]*$", "", words[0])  # file.cc:function, file.cc:123
            if "/" not in word or not PATH_WORD.match(word):
                continue
            if word.split("/", 1)[0] not in roots:
                continue
            if not code_path_exists(root, word):
                problems.append((number, f"cited path that does not exist: {word}"))

        for page in PLAIN_DOCS_PAGE.findall(INLINE_LINK.sub("", text)):
            if not os.path.isfile(os.path.join(root, page)):
                problems.append((number, f"names a page that does not exist: {page}"))
    return problems


def pages(root):
    found = [os.path.join(root, "README.md")]
    for folder, dirs, files in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        found += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".md")]
    return [p for p in found if os.path.isfile(p)]


def check(root):
    """Every broken link under root, as 'file:line: message' lines."""
    root = os.path.abspath(root)
    roots = {
        d for d in os.listdir(root)
        if os.path.isdir(os.path.join(root, d)) and not d.startswith("build") and d != ".git"
    }
    out = []
    for path in pages(root):
        for number, message in check_file(root, path, roots):
            out.append(f"{os.path.relpath(path, root)}:{number}: {message}")
    return out


def self_test():
    """The check on a tree with known breakage must report exactly that breakage."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "src", "db"))
        open(os.path.join(root, "src", "db", "pool.cc"), "w").close()
        with open(os.path.join(root, "README.md"), "w") as f:
            f.write(
                "# Title\n\n"
                "[good](docs/page.md#a-heading--with-punctuation) [good](#title) "
                "`src/db/pool.cc:acquire` `src/db/{pool.cc}` docs/page.md\n"
                "[bad file](docs/missing.md)\n"
                "[bad anchor](docs/page.md#no-such-heading)\n"
                "`src/db/gone.cc` is cited\n"
                "see docs/absent.md\n"
                "```\n[in a code block](nowhere.md)\n```\n"
            )
        with open(os.path.join(root, "docs", "page.md"), "w") as f:
            f.write("# Page\n\n## A heading — with `punctuation`!\n\n[back](../README.md#title)\n")
        got = check(root)
        expected = [
            "README.md:4: link to a missing file: docs/missing.md",
            "README.md:5: link to a missing anchor: docs/page.md#no-such-heading",
            "README.md:6: cited path that does not exist: src/db/gone.cc",
            "README.md:7: names a page that does not exist: docs/absent.md",
        ]
        if got != expected:
            print("check_links.py: the self-test failed; expected:", *expected, "got:", *got,
                  sep="\n  ")
            return False
    return True


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    if not self_test():
        return 1
    problems = check(root)
    for p in problems:
        print(p)
    checked = len(pages(os.path.abspath(root)))
    if problems:
        print(f"check_links.py: {len(problems)} broken link(s) in {checked} page(s)")
        return 1
    print(f"check_links.py: every link of {checked} page(s) holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
