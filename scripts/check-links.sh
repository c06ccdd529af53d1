#!/usr/bin/env bash
# Check that the relative links of the manual resolve.
#
#   scripts/check-links.sh [FILE.md ...]      (default: README.md docs/*.md bench/*.md java/README.md)
#
# For every Markdown file it checks
#   - every relative link and image, [text](target) and ![alt](target): the target (without its
#     #fragment) must exist relative to the file's directory; a #fragment into a Markdown file
#     must name one of its headings (GitHub's anchor rule: lower case, punctuation dropped,
#     spaces to hyphens);
#   - every repository path written in the text (docs/…, bench/…, scripts/…, java/…, rust/…,
#     tests/…, .ci/… ending in a file extension): it must exist relative to the repository
#     root. Paths with wildcards or placeholders (* ? { } < > $ …) are skipped.
# Links to other sites (scheme://, mailto:) are not fetched.
#
# Prints one line per file, "PASS FILE (N links, M paths)" or "FAIL FILE" followed by one
# indented line per broken link ("FILE:LINE: target"), then a summary; exits 1 if any file
# failed, 2 on a usage error.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
if [ $# -eq 0 ]; then
  set -- README.md docs/*.md bench/*.md
  [ -f java/README.md ] && set -- "$@" java/README.md
fi
for f in "$@"; do
  [ -f "$f" ] || { echo "check-links: no such file: $f" >&2; exit 2; }
done
exec python3 - "$@" <<'PY'
import os, re, sys

LINK = re.compile(r'!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
PATH = re.compile(r'(?<![\w./-])((?:docs|bench|scripts|java|rust|tests|\.ci)/[\w./+-]*\.(?:md|jsonl|sh|py|svg|txt|rs|java|toml|jq|c|xml|json|yml|yaml))(?![\w/-])')
SKIP = set('*?{}<>$…')
FENCE = re.compile(r'^\s*(```|~~~)')


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        fence = False
        for line in open(path, encoding='utf-8'):
            if FENCE.match(line):
                fence = not fence
                continue
            m = None if fence else re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
            if m:
                a = re.sub(r'[^\w\- ]', '', m.group(1).replace('`', '').lower()).replace(' ', '-')
                n = seen.get(a, 0)
                seen[a] = n + 1
                out.add(a if n == 0 else f'{a}-{n}')
        cache[path] = out
    return cache[path]


def check(path):
    bad, links, paths = [], 0, 0
    base = os.path.dirname(path)
    fence = False
    for no, line in enumerate(open(path, encoding='utf-8'), 1):
        if FENCE.match(line):
            fence = not fence
        if not fence:
            for m in LINK.finditer(line):
                t = m.group(1)
                if re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', t):
                    continue
                links += 1
                target, _, frag = t.partition('#')
                full = os.path.normpath(os.path.join(base, target)) if target else path
                if not os.path.exists(full):
                    bad.append(f'{path}:{no}: {t}')
                elif frag and full.endswith('.md') and frag.lower() not in anchors(full):
                    bad.append(f'{path}:{no}: {t} (no heading "#{frag}")')
        for m in PATH.finditer(line):
            p = m.group(1).rstrip('.')
            if SKIP & set(p):
                continue
            paths += 1
            if not os.path.exists(p):
                bad.append(f'{path}:{no}: {p} (repository path)')
    return bad, links, paths


failed = 0
for f in sys.argv[1:]:
    bad, links, paths = check(f)
    if bad:
        failed += 1
        print(f'FAIL {f}')
        for b in bad:
            print(f'  {b}')
    else:
        print(f'PASS {f} ({links} links, {paths} paths)')
print(f'check-links: {len(sys.argv) - 1 - failed} passed, {failed} failed')
sys.exit(1 if failed else 0)
PY
