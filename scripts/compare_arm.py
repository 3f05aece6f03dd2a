"""Compare two ARM templates by meaning: the one `bicep build` compiles and the committed
infra/bicep/azuredeploy.json. Left out of the comparison: the generator's stamp
(``metadata._generator``: Bicep's version and template hash, in the template and in every nested
deployment's template). Key order, formatting and the letter case of resource types (Azure
Resource Manager's types are case-insensitive; bicep build writes the case of its own type
definitions, not always the file's) do not count. Everything else does, checkov's
``metadata.checkov`` included: bicep build writes none, so neither may the stand-in.

With ``across_versions`` (the compiler corpus, tests/fixtures/bicep-corpus/, built by other
Bicep versions than the pinned one), also what only changed between Bicep versions and means the
same to Resource Manager: an extension resource's ``scope`` written as the relative
``format('T/{0}', name)`` (Bicep 0.34-0.36) or as ``resourceId('T', name)`` (later).

    python scripts/compare_arm.py COMPILED.json infra/bicep/azuredeploy.json   # exit 1 on drift
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

_TYPE = r"[A-Za-z]+\.[A-Za-z.]+(?:/[A-Za-z0-9]+)+"
TYPE_LITERAL = re.compile(rf"'({_TYPE})(/{{0}})?'")
"""A resource type quoted inside an expression: resourceId('Microsoft.X/y', ...)."""
TYPE_STRING = re.compile(rf"{_TYPE}")
RELATIVE_SCOPE = re.compile(r"\[format\('([^'{}]+)/\{0\}', (.*)\)\]", re.DOTALL)


def _lower_types(text: str) -> str:
    if TYPE_STRING.fullmatch(text):
        return text.lower()
    if text.startswith("["):
        return TYPE_LITERAL.sub(lambda m: m.group(0).lower(), text)
    return text


def normal(node: Any, path: str = "", across_versions: bool = False) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "metadata" and isinstance(value, dict):
                value = {k: v for k, v in value.items() if k != "_generator"}
                if not value:
                    continue
            if across_versions and key == "scope" and isinstance(value, str):
                value = RELATIVE_SCOPE.sub(r"[resourceId('\1', \2)]", value)
            out[key] = normal(value, f"{path}.{key}", across_versions)
        return out
    if isinstance(node, list):
        return [normal(v, f"{path}[{i}]", across_versions) for i, v in enumerate(node)]
    if isinstance(node, str):
        return _lower_types(node)
    return node


def differences(a: Any, b: Any, path: str = "$") -> list[str]:
    """Where ``a`` and ``b`` differ, as JSON paths (at most one line per difference)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only in the first" for k in sorted(set(a) - set(b))]
        out += [f"{path}.{k}: only in the second" for k in sorted(set(b) - set(a))]
        for k in sorted(set(a) & set(b)):
            out += differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)} items"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{path}[{i}]")
        ]
    if a != b:
        return [f"{path}: {json.dumps(a)[:120]} != {json.dumps(b)[:120]}"]
    return []


def compare(first: Path, second: Path) -> list[str]:
    return differences(
        normal(json.loads(first.read_text())), normal(json.loads(second.read_text()))
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    found = compare(Path(argv[0]), Path(argv[1]))
    for line in found[:50]:
        print(line)
    if found:
        print(f"{argv[0]} and {argv[1]} differ in {len(found)} places: run scripts/bicep_to_arm.py,"
              " or fix it where `bicep build` and the stand-in disagree")  # fmt: skip
        return 1
    print(f"{argv[0]} and {argv[1]} are the same template")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
