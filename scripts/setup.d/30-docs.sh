#!/usr/bin/env bash
# The docs site's generator (mkdocs with mkdocs-material, pinned in scripts/docs-requirements.txt)
# for tests/unit/test_docs.py, which builds docs/ with `mkdocs build --strict`. In its own
# environment, built once per machine, requirements file and Python, outside the checkout (a
# fresh clone, as CI's, reuses it), and linked as .tools/docs, as scripts/test.sh does for
# checkov. Uses the system Python ($PYTHON, else python3), never .venv.
# Does nothing when .tools/docs links to an environment made from this requirements file.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON=${PYTHON:-python3}
KEY=$(cat scripts/docs-requirements.txt <("$PYTHON" -VV) | sha256sum | cut -c1-16)
DIR="${XDG_CACHE_HOME:-$HOME/.cache}/azure-ray-rl/docs-$KEY"
LINK=.tools/docs

if [ ! -x "$DIR/complete" ]; then
    rm -rf "$DIR"
    "$PYTHON" -m venv "$DIR"
    "$DIR/bin/python" -m pip install -q --disable-pip-version-check \
        -r scripts/docs-requirements.txt
    "$DIR/bin/mkdocs" --version >/dev/null
    install -m 0755 /dev/null "$DIR/complete"
    echo "docs: installed $("$DIR/bin/mkdocs" --version) in $DIR" >&2
fi
mkdir -p .tools
[ -L "$LINK" ] || rm -rf "$LINK"
ln -sfn "$DIR" "$LINK"
echo "docs: $LINK -> $DIR" >&2
