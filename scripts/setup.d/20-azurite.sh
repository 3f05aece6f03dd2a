#!/usr/bin/env bash
# Azurite, Azure's storage emulator: the rehearsal's Blob storage
# (python/nodekit/rehearsal/services/azurite.py) and the unit tests' (tests/unit/test_azurite.py).
# Installed with npm from scripts/azurite/package-lock.json (every package pinned, with its
# integrity hash), once per machine and lock file, outside the checkout (~190 MB; a fresh
# clone, as CI's, reuses it: installing takes about a minute), and linked as .tools/azurite,
# as scripts/test.sh does for checkov. Azurite 3.35.0 is the newest that runs on node 20 (3.36
# and later need node 22). Needs node and npm on PATH.
# Does nothing when .tools/azurite links to an install made from this lock file.
set -euo pipefail
cd "$(dirname "$0")/../.."

for tool in node npm; do
    command -v "$tool" >/dev/null || {
        echo "Azurite needs $tool on PATH (node 20 or later with npm), and there is none" >&2
        exit 1
    }
done
KEY=$(cat scripts/azurite/package.json scripts/azurite/package-lock.json <(node --version) |
    sha256sum | cut -c1-16)
DIR="${XDG_CACHE_HOME:-$HOME/.cache}/azure-ray-rl/azurite-$KEY"
LINK=.tools/azurite

if [ ! -e "$DIR/complete" ]; then
    rm -rf "$DIR"
    mkdir -p "$DIR"
    cp scripts/azurite/package.json scripts/azurite/package-lock.json "$DIR/"
    # --ignore-scripts: no package's install hooks run; Azurite needs none.
    (cd "$DIR" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
    "$DIR/node_modules/.bin/azurite-blob" --version >/dev/null
    touch "$DIR/complete"
    echo "azurite: installed $("$DIR/node_modules/.bin/azurite-blob" --version) in $DIR" >&2
fi
mkdir -p .tools
[ -L "$LINK" ] || rm -rf "$LINK"
ln -sfn "$DIR" "$LINK"
echo "azurite: $LINK -> $DIR" >&2
