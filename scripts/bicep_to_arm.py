"""Compile infra/bicep/main.bicep to the ARM template the "Deploy to Azure" button deploys,
infra/bicep/azuredeploy.json, the way ``bicep build`` does it for the Bicep this repository
writes (a stand-in: no Bicep compiler installs on these machines; the GitHub workflow compiles
with the real one and fails when the two differ).

    .venv/bin/python scripts/bicep_to_arm.py           # rewrite every azuredeploy.json (TARGETS)
    .venv/bin/python scripts/bicep_to_arm.py --check   # exit 1 if one is stale
    .venv/bin/python scripts/bicep_to_arm.py FILE.bicep  # compile another file to stdout

What it covers, as ``bicep build`` emits it for a languageVersion 1.0 template: params with
their decorators, variables (a variable that reads a module's outputs or a resource's runtime
properties, or calls ``reference()``/``list*()``, is inlined where it is used, as ARM variables
cannot), resources (``parent``, ``scope``, implicit and explicit ``dependsOn``; a scoped one's
id as ``extensionResourceId()``), modules as nested ``Microsoft.Resources/deployments`` with
``expressionEvaluationOptions.scope: inner``, conditions (``= if (expr) {...}``) as
``condition``, outputs, string interpolation as ``format()``, operators as ARM functions,
lambdas as ``lambda()``/``lambdaVariables()``, ``loadTextContent()`` inlined at compile time,
and loops: resource and module collections (``[for x in arr: {...}]``, ``[for (x, i) in arr:
...]``, ``[for i in range(a, n): ...]``, ``[for x in arr: if (cond) {...}]``, ``@batchSize(n)``)
as ARM ``copy`` loops (``{name, count: length(arr)[, mode: serial, batchSize]}``, the item
``arr[copyIndex()]``, the index ``copyIndex()``), a collection named by index
(``mods[i].outputs.x``, ``res[i].id``, ``res[i].name``, ``res[i].properties.x``) as that item's
name, id or reference, in ``dependsOn`` a whole collection as its loop's name and an indexed one
as the item's resourceId, once per indexed reference as bicep build lists them; a variable's or
output's for-expression as a variable or output ``copy``. Anything else is an error, not a
guess: one line, ``file:line: construct not supported: what`` (exit 2), for every construct it
does not compile exactly as ``bicep build`` does (``existing``, property loops and other nested
for-expressions, a collection named by different indices in one statement or by a lambda's or
for-expression's variable, ``targetScope`` other than resourceGroup, module ``scope``, a scope
that is an extension resource, decorators on resources other than ``@batchSize`` on a loop,
Bicep-only functions such as ``any()``, types, imports, ...). tests/unit/test_bicep_compiler.py
holds it to the real compiler's output for the public files in tests/fixtures/bicep-corpus/.
Checkov's skips are not carried into the template (``bicep build`` drops comments): the ARM
scan's skips live in .checkov.yaml. Its own parser is independent of pycep-parser, which the
tests use to read main.bicep.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BICEP_DIR = REPO / "infra" / "bicep"
MAIN = BICEP_DIR / "main.bicep"
OUTPUT = BICEP_DIR / "azuredeploy.json"
IMAGE_MAIN = BICEP_DIR / "image" / "main.bicep"
IMAGE_OUTPUT = BICEP_DIR / "image" / "azuredeploy.json"
RESULTS_MAIN = BICEP_DIR / "results.bicep"
RESULTS_OUTPUT = BICEP_DIR / "results.json"
TARGETS = ((MAIN, OUTPUT), (IMAGE_MAIN, IMAGE_OUTPUT), (RESULTS_MAIN, RESULTS_OUTPUT))
"""Each committed template and the Bicep it is compiled from: the cluster, the node image and
the results storage."""
SCHEMA = "https://schema.management.azure.com/schemas/2019-04-01/deploymentTemplate.json#"
DEPLOYMENTS_API = "2022-09-01"
"""The api-version ``bicep build`` (0.34) gives module deployments."""
GENERATOR = {"name": "bicep", "version": "0.34.44.8038", "templateHash": "0"}
"""The Bicep CLI version the workflow pins; templateHash is left out of every comparison."""


class BicepError(Exception):
    """A construct this stand-in does not compile exactly as ``bicep build`` does: reported as
    one line, ``file:line: construct not supported: what``."""

    def __init__(self, what: str, line: int | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.line = line
        self.path: Path | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line if self.line is not None else '?'}: "
        return where + f"construct not supported: {self.what}"


# -- tokens ----------------------------------------------------------------------------------
@dataclass
class Tok:
    kind: str  # ident, int, str, op, nl, eof
    value: Any
    line: int


_OPS = [
    "=>", "==", "!=", "=~", "!~", "<=", ">=", "&&", "||", "??",
    "{", "}", "[", "]", "(", ")", ",", ":", ".", "?", "!", "<", ">", "+", "-", "*", "/", "%",
    "=", "@",
]  # fmt: skip
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", "'": "'", "$": "$"}


def tokenize(text: str) -> list[Tok]:
    toks: list[Tok] = []
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            toks.append(Tok("nl", None, line))
            line += 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i)
            if end < 0:
                raise BicepError("an unterminated comment", line)
            line += text.count("\n", i, end)
            i = end + 2
        elif c == "#" and (not toks or toks[-1].kind == "nl"):  # #disable-next-line ...
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("'''", i):
            end = text.find("'''", i + 3)
            if end < 0:
                raise BicepError("an unterminated string", line)
            body = text[i + 3 : end]
            if body.startswith("\n"):
                body = body[1:]
            elif body.startswith("\r\n"):
                body = body[2:]
            toks.append(Tok("str", [body], line))
            line += text.count("\n", i, end)
            i = end + 3
        elif c == "'":
            parts, i, line = _string(text, i + 1, line)
            toks.append(Tok("str", parts, line))
        elif c.isdigit():
            j = i
            while j < n and text[j].isdigit():
                j += 1
            toks.append(Tok("int", int(text[i:j]), line))
            i = j
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            toks.append(Tok("ident", text[i:j], line))
            i = j
        else:
            for op in _OPS:
                if text.startswith(op, i):
                    toks.append(Tok("op", op, line))
                    i += len(op)
                    break
            else:
                raise BicepError(f"the character {c!r}", line)
    toks.append(Tok("eof", None, line))
    return toks


def _string(text: str, i: int, line: int) -> tuple[list[Any], int, int]:
    """A single-quoted string from just after its quote: literal pieces and interpolated
    token lists, alternating."""
    parts: list[Any] = []
    buf: list[str] = []
    while True:
        if i >= len(text):
            raise BicepError("an unterminated string", line)
        c = text[i]
        if c == "'":
            parts.append(_utf16("".join(buf), line))
            return parts, i + 1, line
        if c == "\n":
            raise BicepError("newline in a string", line)
        if c == "\\":
            e = text[i + 1]
            if e == "u":
                end = text.index("}", i)
                buf.append(chr(int(text[i + 3 : end], 16)))
                i = end + 1
                continue
            if e not in _ESCAPES:
                raise BicepError(f"unknown escape \\{e}", line)
            buf.append(_ESCAPES[e])
            i += 2
            continue
        if text.startswith("${", i):
            parts.append(_utf16("".join(buf), line))
            buf = []
            depth, j = 1, i + 2
            while depth:
                if text[j] == "'":  # a string inside the interpolation
                    _, j, line = _string(text, j + 1, line)
                    continue
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            inner = tokenize(text[i + 2 : j - 1])
            parts.append(inner)
            i = j
            continue
        buf.append(c)
        i += 1


def _utf16(text: str, line: int) -> str:
    """A string whose escapes wrote a surrogate pair (``'\\u{D801}\\u{DC37}'``) holds the one
    character the pair encodes, as in Bicep's UTF-16 strings."""
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    try:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        raise BicepError("a lone surrogate escape in a string", line) from None


# -- syntax tree -------------------------------------------------------------------------------
# Expressions are tuples: ("str", parts) ("int", n) ("bool", b) ("null",) ("ident", name)
# ("array", [e]) ("object", [(key, e)]) ("call", name, [e]) ("prop", e, name) ("index", e, e)
# ("unary", op, e) ("binary", op, e, e) ("ternary", c, a, b) ("lambda", [names], e)


class Parser:
    def __init__(self, toks: list[Tok]) -> None:
        self.toks = toks
        self.pos = 0

    def peek(self, k: int = 0) -> Tok:
        return self.toks[self.pos + k]

    def next(self) -> Tok:
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def expect(self, kind: str, value: Any = None) -> Tok:
        tok = self.next()
        if tok.kind != kind or (value is not None and tok.value != value):
            raise BicepError(f"{tok.value!r} where {value or kind} is expected", tok.line)
        return tok

    def is_op(self, value: str, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok.kind == "op" and tok.value == value

    def skip_nl(self) -> None:
        while self.peek().kind == "nl":
            self.pos += 1

    # statements
    def statements(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        decorators: list[tuple[str, list[Any]]] = []
        while True:
            self.skip_nl()
            tok = self.peek()
            if tok.kind == "eof":
                return found
            if self.is_op("@"):
                self.next()
                name = self.expect("ident").value
                if name == "sys" and self.is_op("."):  # @sys.batchSize(...): the same decorator
                    self.next()
                    name = self.expect("ident").value
                self.expect("op", "(")
                args = self.arguments()
                decorators.append((name, args))
                continue
            keyword = self.expect("ident").value
            stmt: dict[str, Any] = {"kind": keyword, "decorators": decorators, "line": tok.line}
            decorators = []
            if keyword == "targetScope":
                self.expect("op", "=")
                stmt["value"] = self.expression()
            elif keyword in ("metadata", "var"):
                stmt["name"] = self.expect("ident").value
                self.expect("op", "=")
                stmt["value"] = self.expression()
            elif keyword == "param":
                stmt["name"] = self.expect("ident").value
                stmt["type"] = self.expect("ident").value
                if self.is_op("="):
                    self.next()
                    stmt["default"] = self.expression()
            elif keyword == "output":
                stmt["name"] = self.expect("ident").value
                stmt["type"] = self.expect("ident").value
                self.expect("op", "=")
                stmt["value"] = self.expression()
            elif keyword in ("resource", "module"):
                stmt["name"] = self.expect("ident").value
                path = self.expect("str").value
                if len(path) != 1:
                    raise BicepError(f"an interpolated {keyword} path", tok.line)
                stmt["target"] = path[0]
                if self.peek().kind == "ident" and self.peek().value == "existing":
                    raise BicepError("existing resources", tok.line)
                self.expect("op", "=")
                if self.peek().kind == "ident" and self.peek().value == "if":
                    self.next()
                    self.expect("op", "(")
                    stmt["condition"] = self.expression()
                    self.expect("op", ")")
                stmt["value"] = self.expression()
                if stmt["value"][0] == "for" and "condition" not in stmt:
                    # a collection: the loop apart, its body as a single declaration's
                    stmt["loop"] = stmt["value"]
                    stmt["value"] = stmt["loop"][4]
                    if stmt["loop"][5] is not None:
                        stmt["condition"] = stmt["loop"][5]
            else:
                raise BicepError(f"the statement {keyword!r}", tok.line)
            stmt["end"] = self.peek().line
            found.append(stmt)

    def arguments(self) -> list[Any]:
        args: list[Any] = []
        self.skip_nl()
        while not self.is_op(")"):
            args.append(self.expression())
            self.skip_nl()
            if self.is_op(","):
                self.next()
                self.skip_nl()
        self.next()
        return args

    # expressions
    def expression(self) -> Any:
        cond = self.binary(0)
        if self.is_op("?"):
            self.next()
            self.skip_nl()
            a = self.expression()
            self.skip_nl()
            self.expect("op", ":")
            self.skip_nl()
            b = self.expression()
            return ("ternary", cond, a, b)
        return cond

    _LEVELS: tuple[tuple[str, ...], ...] = (
        ("||",),
        ("&&",),
        ("==", "!=", "=~", "!~"),
        ("<", "<=", ">", ">="),
        ("+", "-"),
        ("*", "/", "%"),
    )

    def binary(self, level: int) -> Any:
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek().kind == "op" and self.peek().value in self._LEVELS[level]:
            op = self.next().value
            self.skip_nl()
            left = ("binary", op, left, self.binary(level + 1))
        return left

    def unary(self) -> Any:
        if self.is_op("!"):
            self.next()
            return ("unary", "!", self.unary())
        if self.is_op("-"):
            self.next()
            operand = self.unary()
            if operand[0] == "int":
                return ("int", -operand[1])
            return ("unary", "-", operand)
        return self.postfix()

    def postfix(self) -> Any:
        e = self.primary()
        while True:
            if self.is_op("."):
                self.next()
                e = ("prop", e, self.expect("ident").value)
            elif self.is_op("["):
                self.next()
                self.skip_nl()
                index = self.expression()
                self.skip_nl()
                self.expect("op", "]")
                e = ("index", e, index)
            else:
                return e

    def primary(self) -> Any:
        tok = self.peek()
        if tok.kind == "int":
            self.next()
            return ("int", tok.value)
        if tok.kind == "str":
            self.next()
            return ("str", [p if isinstance(p, str) else Parser(p).whole() for p in tok.value])
        if tok.kind == "ident":
            if self.is_op("=>", 1):  # x => ...
                self.pos += 2
                return ("lambda", [tok.value], self.expression())
            self.next()
            if tok.value in ("true", "false"):
                return ("bool", tok.value == "true")
            if tok.value == "null":
                return ("null",)
            if self.is_op("("):
                self.next()
                return ("call", tok.value, self.arguments(), tok.line)
            return ("ident", tok.value)
        if self.is_op("("):
            # (a, b, c) => ... or a parenthesised expression
            j = self.pos + 1
            names: list[str] = []
            while self.toks[j].kind == "ident" and self.toks[j + 1].kind == "op":
                names.append(self.toks[j].value)
                if self.toks[j + 1].value == ",":
                    j += 2
                    continue
                if self.toks[j + 1].value == ")" and self.toks[j + 2].value == "=>":
                    self.pos = j + 3
                    return ("lambda", names, self.expression())
                break
            self.next()
            self.skip_nl()
            e = self.expression()
            self.skip_nl()
            self.expect("op", ")")
            return e
        if self.is_op("["):
            self.next()
            self.skip_nl()
            if self.peek().kind == "ident" and self.peek().value == "for":
                return self.for_loop()
            items = []
            self.skip_nl()
            while not self.is_op("]"):
                items.append(self.expression())
                if self.is_op(","):
                    self.next()
                self.skip_nl()
            self.next()
            return ("array", items)
        if self.is_op("{"):
            self.next()
            props = []
            self.skip_nl()
            while not self.is_op("}"):
                key_tok = self.next()
                if key_tok.kind == "ident":
                    key: Any = key_tok.value
                elif key_tok.kind == "str":
                    key = [p if isinstance(p, str) else Parser(p).whole() for p in key_tok.value]
                    key = key[0] if len(key) == 1 else ("str", key)
                else:
                    raise BicepError(f"the object key {key_tok.value!r}", key_tok.line)
                self.expect("op", ":")
                self.skip_nl()
                props.append((key, self.expression()))
                if self.is_op(","):
                    self.next()
                self.skip_nl()
            self.next()
            return ("object", props)
        raise BicepError(f"{tok.value!r} in an expression", tok.line)

    def for_loop(self) -> Any:
        """``[for x in arr: body]``, ``[for (x, i) in arr: ...]``, ``[for x in arr: if (c)
        body]`` from just after its ``[``: ("for", item, index or None, iterable, body,
        condition or None)."""
        self.next()  # for
        index: str | None = None
        if self.is_op("("):
            self.next()
            item = self.expect("ident").value
            self.expect("op", ",")
            index = self.expect("ident").value
            self.expect("op", ")")
        else:
            item = self.expect("ident").value
        keyword = self.expect("ident")
        if keyword.value != "in":
            raise BicepError("expected in", keyword.line)
        iterable = self.expression()
        self.expect("op", ":")
        self.skip_nl()
        condition = None
        if self.peek().kind == "ident" and self.peek().value == "if":
            self.next()
            self.expect("op", "(")
            condition = self.expression()
            self.expect("op", ")")
            self.skip_nl()
        body = self.expression()
        self.skip_nl()
        self.expect("op", "]")
        return ("for", item, index, iterable, body, condition)

    def whole(self) -> Any:
        self.skip_nl()
        e = self.expression()
        self.skip_nl()
        self.expect("eof")
        return e


# -- compilation -------------------------------------------------------------------------------
_BINARY = {
    "||": "or", "&&": "and", "==": "equals", "<": "less", "<=": "lessOrEquals", ">": "greater",
    ">=": "greaterOrEquals", "+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod",
}  # fmt: skip
_PARAM_TYPES = {"string": "string", "int": "int", "bool": "bool", "object": "object",
                "array": "array"}  # fmt: skip
_RESOURCE_KEYS = {"name", "location", "tags", "sku", "kind", "properties", "identity",
                  "zones", "plan", "parent", "scope", "dependsOn", "extendedLocation",
                  "managedBy"}  # fmt: skip
"""Resource body properties this stand-in compiles; any other is refused."""
_MODULE_KEYS = {"name", "params", "dependsOn"}
"""Module body properties this stand-in compiles (``scope`` is refused: another deployment's
resourceGroup/subscriptionId, which this stand-in does not emit)."""
_ARM_FUNCTIONS = frozenset(
    re.split(
        r"\s+",
        """
    array concat contains createArray empty first filter flatten indexOf intersection items last
    lastIndexOf length map max min range reduce skip sort take union toObject mapValues groupBy
    objectKeys shallowMerge coalesce equals greater greaterOrEquals less lessOrEquals dateTimeAdd
    dateTimeFromEpoch dateTimeToEpoch utcNow deployment environment and bool not or add div float
    int mod mul sub json extensionResourceId pickZones providers reference resourceId
    subscriptionResourceId tenantResourceId managementGroupResourceId resourceGroup subscription
    tenant managementGroup base64 base64ToJson base64ToString dataUri dataUriToString endsWith
    format guid join newGuid padLeft replace split startsWith string substring toLower toUpper
    trim uniqueString uri uriComponent uriComponentToString parseCidr cidrSubnet cidrHost
""".strip(),
    )
)
"""Functions ``bicep build`` writes into the template as they are called (ARM's own, same name
and arguments). Bicep-only functions (``any``, ``loadJsonContent``, ...) are compiled away by
Bicep and refused here, except loadTextContent."""
_RUNTIME_FUNCTIONS = re.compile(r"reference|list[A-Z]\w*|to(Logical|Physical)Zones?")
"""Functions Bicep flags RequiresInlining: a variable that calls one is inlined where used."""
_DECORATOR_KEYS = {"minValue": "minValue", "maxValue": "maxValue", "minLength": "minLength",
                   "maxLength": "maxLength", "allowed": "allowedValues"}  # fmt: skip


def _names(e: Any) -> set[str]:
    """Every identifier an expression mentions."""
    if isinstance(e, list):
        return set().union(*(_names(x) for x in e)) if e else set()
    if not isinstance(e, tuple) or not e:
        return set()
    if e[0] == "ident":
        return {e[1]}
    return set().union(*(_names(x) for x in e[1:]))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass
class Symbol:
    kind: str  # param, var, resource, module
    stmt: dict[str, Any]
    runtime: bool = False
    resource_type: str = ""
    api_version: str = ""
    deps: set[str] = field(default_factory=set)

    @property
    def looped(self) -> bool:
        """A resource or module collection (``= [for ...]``): ARM's copy loop."""
        return "loop" in self.stmt


class Compiler:
    def __init__(self, path: Path, deployments_api: str = DEPLOYMENTS_API) -> None:
        self.path = path
        self.deployments_api = deployments_api
        """The api-version of module deployments: the pinned Bicep's unless told otherwise (the
        corpus test compares with templates other Bicep versions built)."""
        self.line: int | None = None
        """The line of the statement being compiled, for refusals that have no line of their own."""
        self.symbols: dict[str, Symbol] = {}
        self._var_deps: dict[str, list[tuple[str, Any]]] = {}
        self._var_runtime: dict[str, bool] = {}
        self.loop: dict[str, str] = {}
        """A for-expression's variable -> its ARM expression (the item at copyIndex)."""
        self.current: str | None = None
        """The collection whose loop variables ``loop`` holds, while it is compiled."""
        with self.located():
            try:
                # newlines as the file has them (a multi-line string keeps its CRLFs, as in
                # bicep build); a byte order mark is no part of the text
                text = path.read_bytes().decode("utf-8").removeprefix("\ufeff")
            except (OSError, UnicodeDecodeError) as error:
                raise BicepError(
                    f"a file that cannot be read ({error.strerror or error})", 1
                ) from None
            try:
                self.stmts = Parser(tokenize(text)).statements()
            except (ValueError, IndexError):  # a string, comment or interpolation never closed
                raise BicepError(
                    "an unterminated string or comment", text.count("\n") + 1
                ) from None
            for stmt in self.stmts:
                self.line = stmt["line"]
                self.check_statement(stmt)
                kind = stmt["kind"]
                if kind in ("param", "var", "resource", "module"):
                    symbol = Symbol(kind, stmt)
                    if kind == "resource":
                        symbol.resource_type, _, symbol.api_version = stmt["target"].partition("@")
                    self.symbols[stmt["name"]] = symbol
            for symbol in self.symbols.values():
                self.line = symbol.stmt["line"]
                if symbol.kind == "resource":
                    parent = self._prop(symbol.stmt["value"], "parent")
                    if parent is not None:
                        target = self._symbol_ref(parent, "resource", "parent")
                        if target.looped:
                            raise BicepError("a parent that is a resource collection (a loop)")
                        if "/" not in symbol.resource_type:
                            symbol.resource_type = target.resource_type + "/" + symbol.resource_type
                        elif symbol.resource_type.rsplit("/", 1)[0] != target.resource_type:
                            raise BicepError("a child type that is not its parent's type")
            for stmt in self.stmts:
                self.line = stmt["line"]
                loop = stmt.get("loop", stmt.get("value"))
                if loop is not None and loop[0] == "for":
                    for local in loop[1:3]:
                        # a loop variable hides a parameter of its name, as in Bicep; one
                        # named like a variable, resource or module is not compiled here
                        if local in self.symbols and self.symbols[local].kind != "param":
                            raise BicepError(f"the loop variable {local} named as a symbol")
                    if self._dependencies(loop[3]):
                        raise BicepError("a loop over an array that reads a resource or module")
            for symbol in self.symbols.values():
                if symbol.kind == "var":
                    symbol.runtime = self._is_runtime(symbol.stmt["value"], set())
            self.line = None

    @contextmanager
    def located(self) -> Iterator[None]:
        """Refusals raised inside name this file and the line (the statement's, if none)."""
        try:
            yield
        except BicepError as error:
            if error.path is None:
                error.path = self.path
                if error.line is None:
                    error.line = self.line
            raise
        except RecursionError:
            raise BicepError("an expression nested too deeply", self.line) from None

    def _symbol_ref(self, e: Any, kind: str, role: str) -> Symbol:
        """The symbol a ``parent:``/``scope:``/``dependsOn`` item names, of the kind expected."""
        symbol = self.symbols.get(e[1]) if e[0] == "ident" else None
        if symbol is None or symbol.kind not in kind.split("|"):
            raise BicepError(
                f"{role}: something other than a {kind.replace('|', ' or ')} of this file"
            )
        return symbol

    def check_statement(self, stmt: dict[str, Any]) -> None:
        """Refuse what this stand-in would otherwise compile differently from ``bicep build``."""
        kind = stmt["kind"]
        if kind == "targetScope":
            value = stmt["value"]
            if value != ("str", ["resourceGroup"]):
                raise BicepError("targetScope other than 'resourceGroup' (another template schema)")
        decorators = [name for name, _ in stmt["decorators"]]
        if kind in ("resource", "module") and decorators == ["batchSize"] and "loop" in stmt:
            args = stmt["decorators"][0][1]
            if len(args) != 1 or args[0][0] != "int":
                raise BicepError("@batchSize without one integer literal")
            decorators = []
        if kind in ("var", "resource", "module", "metadata", "targetScope") and decorators:
            raise BicepError(f"the decorator @{decorators[0]} on a {kind}")
        if kind in ("param", "output") and stmt["type"] not in _PARAM_TYPES:
            raise BicepError(f"the {kind} type {stmt['type']}")
        if kind in ("resource", "module"):
            body = stmt["value"]
            if body[0] != "object":
                raise BicepError(f"a {kind} declared as a {body[0]} (loops)")
            keys = [k for k, _ in body[1]]
            allowed = _RESOURCE_KEYS if kind == "resource" else _MODULE_KEYS
            for key in keys:
                if not isinstance(key, str) or key not in allowed:
                    raise BicepError(f"the {kind} property {key!r}")
            if "name" not in keys:
                raise BicepError(f"a {kind} without a name")
            if kind == "resource" and "@" not in stmt["target"]:
                raise BicepError("a resource type without an api-version")
            if kind == "module" and not stmt["target"].endswith(".bicep"):
                raise BicepError(f"the module source {stmt['target']!r} (only local .bicep files)")
            explicit = self._prop(body, "dependsOn")
            if explicit is not None and explicit[0] != "array":
                raise BicepError("a dependsOn that is not an array literal")
            params = self._prop(body, "params") if kind == "module" else None
            if params is not None and (
                params[0] != "object" or not all(isinstance(k, str) for k, _ in params[1])
            ):
                raise BicepError("module params that are not an object literal with plain keys")

    # helpers
    @staticmethod
    def _prop(obj: Any, key: str) -> Any:
        if obj[0] != "object":
            raise BicepError(f"a {obj[0]} where an object literal is expected (loops, conditions)")
        for k, v in obj[1]:
            if k == key:
                return v
        return None

    def _var_is_runtime(self, name: str, seen: set[str]) -> bool:
        if name not in self._var_runtime:  # once per variable: they chain deeply
            value = self.symbols[name].stmt["value"]
            self._var_runtime[name] = self._is_runtime(value, seen | {name})
        return self._var_runtime[name]

    def _is_runtime(self, e: Any, seen: set[str]) -> bool:
        """Does the expression read a module's outputs or a resource's runtime properties, or
        call a function Bicep inlines a variable for (``reference()``, ``list*()``, the zone
        mappings)?"""
        found = False

        def visit(node: Any, lambdas: frozenset[str]) -> None:
            nonlocal found
            if not isinstance(node, tuple):
                return
            if node[0] == "call" and _RUNTIME_FUNCTIONS.fullmatch(node[1]):
                found = True
            subject = node[1] if node[0] == "prop" else None
            if subject and subject[0] == "index" and subject[1][0] == "ident":
                subject = subject[1]  # mods[i].outputs.x
            if subject and subject[0] == "ident":
                target = self.symbols.get(subject[1])
                if (
                    target
                    and target.kind in ("module", "resource")
                    and node[2]
                    not in (
                        "id",
                        "name",
                        "type",
                        "apiVersion",
                    )
                ):
                    found = True
            if node[0] == "ident" and node[1] not in lambdas:
                target = self.symbols.get(node[1])
                if (
                    target
                    and target.kind == "var"
                    and node[1] not in seen
                    and self._var_is_runtime(node[1], seen)
                ):
                    found = True
            if node[0] == "lambda":
                visit(node[2], lambdas | set(node[1]))
                return
            for child in node[1:]:
                if isinstance(child, tuple):
                    visit(child, lambdas)
                elif isinstance(child, list):
                    for item in child:
                        if isinstance(item, tuple):
                            visit(item, lambdas)
                            if len(item) == 2 and isinstance(item[1], tuple):
                                visit(item[1], lambdas)

        visit(e, frozenset())
        return found

    def _dependencies(self, e: Any, lambdas: frozenset[str] = frozenset()) -> list[tuple[str, Any]]:
        """Resource and module symbols an expression refers to, through variables too: (name,
        None), or (name, index expression) for each indexed reference to a collection
        (``mods[i].outputs.x``). bicep build keeps one dependency per symbol, but one per
        indexed reference in the source (its syntax node, so a variable's counts once however
        often the variable is used): so do these, by the identity of the index's node."""
        found: list[tuple[str, Any]] = []
        seen: set[tuple[str, int]] = set()

        def add(ref: tuple[str, Any]) -> None:
            key = (ref[0], id(ref[1]) if ref[1] is not None else 0)
            if key not in seen:
                seen.add(key)
                found.append(ref)

        def visit(node: Any, lambdas: frozenset[str]) -> None:
            if isinstance(node, list):
                for item in node:
                    visit(item, lambdas)
                return
            if not isinstance(node, tuple):
                return
            if node[0] == "index" and node[1][0] == "ident" and node[1][1] not in lambdas:
                target = self.symbols.get(node[1][1])
                if target and target.looped:
                    if _names(node[2]) & lambdas:  # its dependsOn cannot name that item
                        raise BicepError(
                            f"the collection {node[1][1]} named by index inside a lambda or"
                            " for-expression"
                        )
                    add((node[1][1], node[2]))
                    visit(node[2], lambdas)
                    return
            if node[0] == "ident" and node[1] not in lambdas:
                target = self.symbols.get(node[1])
                if target and target.kind in ("resource", "module"):
                    add((node[1], None))
                elif target and target.kind == "var":
                    if node[1] not in self._var_deps:  # once per variable: they chain deeply
                        self._var_deps[node[1]] = self._dependencies(target.stmt["value"])
                    for d in self._var_deps[node[1]]:
                        add(d)
                return
            if node[0] == "lambda":
                visit(node[2], lambdas | set(node[1]))
                return
            if node[0] == "for":  # its variables are local, as a lambda's
                _, item, position, iterable, body, condition = node
                visit(iterable, lambdas)
                local = lambdas | {item} | ({position} if position else set())
                visit(body, local)
                visit(condition, local)
                return
            if node[0] == "object":
                for k, v in node[1]:
                    if isinstance(k, tuple):
                        visit(k, lambdas)
                    visit(v, lambdas)
                return
            if node[0] == "str":
                for p in node[1]:
                    visit(p, lambdas)
                return
            for child in node[1:]:
                visit(child, lambdas)

        visit(e, lambdas)
        return found

    # expressions
    def expr(self, e: Any, lambdas: frozenset[str] = frozenset()) -> str:
        """An ARM expression (without the surrounding brackets)."""
        kind = e[0]
        if kind == "str":
            literal = [p for p in e[1] if isinstance(p, str)]
            if len(e[1]) == 1:
                return _quote(e[1][0])
            fmt, args, n = "", [], 0
            for part in e[1]:
                if isinstance(part, str):
                    fmt += part.replace("{", "{{").replace("}", "}}")
                else:
                    fmt += "{" + str(n) + "}"
                    args.append(self.expr(part, lambdas))
                    n += 1
            del literal
            return f"format({', '.join([_quote(fmt), *args])})"
        if kind == "int":
            return str(e[1])
        if kind == "bool":
            return "true()" if e[1] else "false()"
        if kind == "null":
            return "null()"
        if kind == "ident":
            return self.ident(e[1], lambdas)
        if kind == "array":
            return f"createArray({', '.join(self.expr(x, lambdas) for x in e[1])})"
        if kind == "object":
            args = []
            for k, v in e[1]:
                args += [_quote(k) if isinstance(k, str) else self.expr(k, lambdas)]
                args.append(self.expr(v, lambdas))
            return f"createObject({', '.join(args)})"
        if kind == "call":
            return self.call(e[1], e[2], lambdas, e[3])
        if kind == "prop":
            return self.prop(e, lambdas)
        if kind == "index":
            return f"{self.expr(e[1], lambdas)}[{self.expr(e[2], lambdas)}]"
        if kind == "unary":
            inner = self.expr(e[2], lambdas)
            return f"not({inner})" if e[1] == "!" else f"sub(0, {inner})"
        if kind == "binary":
            op, a, b = e[1], self.expr(e[2], lambdas), self.expr(e[3], lambdas)
            if op == "!=":
                return f"not(equals({a}, {b}))"
            if op in ("=~", "!~"):
                raise BicepError(f"the {op} operator (case-insensitive comparison)")
            return f"{_BINARY[op]}({a}, {b})"
        if kind == "ternary":
            parts = (self.expr(x, lambdas) for x in e[1:])
            return f"if({', '.join(parts)})"
        if kind == "lambda":
            inner = lambdas | set(e[1])
            names = ", ".join(_quote(n) for n in e[1])
            return f"lambda({names}, {self.expr(e[2], inner)})"
        raise BicepError(f"a {kind} expression")

    def ident(self, name: str, lambdas: frozenset[str]) -> str:
        if name in lambdas:
            return f"lambdaVariables({_quote(name)})"
        if name in self.loop:
            return self.loop[name]
        symbol = self.symbols.get(name)
        if symbol is None:
            raise BicepError(f"the name {name} (not a parameter or variable of this file)")
        if symbol.kind == "param":
            return f"parameters({_quote(name)})"
        if symbol.kind == "var":
            if symbol.runtime:
                return self.expr(symbol.stmt["value"], frozenset())
            return f"variables({_quote(name)})"
        raise BicepError(f"the {symbol.kind} {name} used as a value")

    def call(self, name: str, args: list[Any], lambdas: frozenset[str], line: int) -> str:
        if name == "loadTextContent":
            return _quote(self.load_text(args))
        if name not in _ARM_FUNCTIONS and not re.fullmatch(r"list[A-Z]\w*", name):
            raise BicepError(f"the function {name}()", line)
        return f"{name}({', '.join(self.expr(a, lambdas) for a in args)})"

    def load_text(self, args: list[Any]) -> str:
        if len(args) != 1 or args[0][0] != "str" or len(args[0][1]) != 1:
            raise BicepError("loadTextContent() without exactly one literal path")
        try:
            text = (self.path.parent / args[0][1][0]).read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as error:
            why = error.strerror if isinstance(error, OSError) else error.reason
            raise BicepError(f"loadTextContent() of a file that cannot be read ({why})") from None
        if "\r" in text:  # bicep build's newlines for it are not proven here
            raise BicepError("loadTextContent() of a file with carriage returns")
        return text

    @contextmanager
    def bound(self, stmt: dict[str, Any], index: str) -> Iterator[str]:
        """Compile inside the collection ``stmt`` at ``index`` (an ARM expression): its item is
        ``array[index]``, its index ``index``; yields the array. ``copyIndex()`` while it is
        emitted; the index of a reference (``mods[i]``) when another statement names one."""
        _, item, position, iterable, _, _ = stmt["loop"]
        saved = self.loop, self.current
        self.loop, self.current = {}, None  # the array: the file's symbols, no loop's
        try:
            source = self.expr(iterable)
            self.loop = {item: f"{source}[{index}]"}
            if position is not None:
                self.loop[position] = index
            self.current = stmt["name"]
            yield source
        finally:
            self.loop, self.current = saved

    @contextmanager
    def at(self, name: str, index: str | None) -> Iterator[None]:
        """Compile a symbol's name: a collection's at ``index``, or at copyIndex() while the
        collection itself is emitted."""
        symbol = self.symbols[name]
        if not symbol.looped or (index is None and self.current == name):
            yield
            return
        if index is None:
            raise BicepError(f"the {symbol.kind} collection {name} without an index")
        with self.bound(symbol.stmt, index):
            yield

    def resource_id(self, name: str, index: str | None = None) -> str:
        symbol = self.symbols[name]
        if symbol.kind == "module":
            with self.at(name, index):
                mod_name = self.expr(self._prop(symbol.stmt["value"], "name"))
            return f"resourceId('Microsoft.Resources/deployments', {mod_name})"
        parts = self.name_parts(name, index)
        segments = symbol.resource_type.count("/")
        if len(parts) == 1 and segments > 1:
            # A child named 'parent/child' without `parent:`: one resourceId argument per
            # segment, each cut from the whole name, as bicep build writes it.
            parts = [f"split({parts[0]}, '/')[{i}]" for i in range(segments)]
        elif len(parts) != segments:
            raise BicepError(f"a {symbol.resource_type} whose name has {len(parts)} parts")
        scope = self._prop(symbol.stmt["value"], "scope")
        if scope is not None:  # an extension resource: its id hangs off its scope's
            self._symbol_ref(scope, "resource", "scope")
            args = [self.resource_id(scope[1]), _quote(symbol.resource_type), *parts]
            return f"extensionResourceId({', '.join(args)})"
        return f"resourceId({', '.join([_quote(symbol.resource_type), *parts])})"

    def name_parts(self, name: str, index: str | None = None) -> list[str]:
        symbol = self.symbols[name]
        body = symbol.stmt["value"]
        parent = self._prop(body, "parent")
        with self.at(name, index):
            own = self.expr(self._prop(body, "name"))
        return [*(self.name_parts(parent[1]) if parent else []), own]

    def full_name(self, name: str) -> str:
        parts = self.name_parts(name)
        if len(parts) == 1:
            return parts[0]
        pattern = "/".join(f"{{{i}}}" for i in range(len(parts)))
        return f"format({_quote(pattern)}, {', '.join(parts)})"

    def prop(self, e: Any, lambdas: frozenset[str]) -> str:
        # symbol.id / symbol.name / symbol.properties.x / module.outputs.x
        # collection[i].id / .name / .properties.x / .outputs.x: the same at index i
        chain: list[str] = []
        node = e
        while node[0] == "prop":
            chain.insert(0, node[2])
            node = node[1]
        index: str | None = None
        if node[0] == "index" and node[1][0] == "ident" and node[1][1] not in lambdas:
            target = self.symbols.get(node[1][1])
            if target is not None and target.looped:
                index = self.expr(node[2], lambdas)
                node = node[1]
        if node[0] == "ident" and node[1] not in lambdas and node[1] in self.symbols:
            symbol = self.symbols[node[1]]
            if symbol.looped and index is None:
                raise BicepError(f"the {symbol.kind} collection {node[1]} without an index")
            shown = node[1] + ("[...]" if index is not None else "")
            if symbol.kind == "resource":
                if chain == ["id"]:
                    return self.resource_id(node[1], index)
                if chain == ["name"]:  # a child's own name, as Bicep gives it
                    return self.name_parts(node[1], index)[-1]
                if chain[0] == "properties":
                    rid = self.resource_id(node[1], index)
                    ref = f"reference({rid}, {_quote(symbol.api_version)})"
                    return ref + "".join(f".{c}" for c in chain[1:])
                raise BicepError(f"the resource access {shown}.{'.'.join(chain)}")
            if symbol.kind == "module":
                if chain[0] != "outputs" or len(chain) < 2:
                    raise BicepError(f"the module access {shown}.{'.'.join(chain)}")
                rid = self.resource_id(node[1], index)
                ref = f"reference({rid}, {_quote(self.deployments_api)})"
                return f"{ref}.outputs.{chain[1]}.value" + "".join(f".{c}" for c in chain[2:])
        return f"{self.expr(e[1], lambdas)}.{e[2]}"

    # JSON values: literals stay literals, everything else becomes "[expression]"
    def value(self, e: Any) -> Any:
        kind = e[0]
        if kind == "str" and len(e[1]) == 1:
            text = e[1][0]
            # ARM reads a string in [ ] as an expression: only such a literal is escaped
            return "[" + text if text.startswith("[") and text.endswith("]") else text
        if kind == "int":
            return e[1]
        if kind == "bool":
            return e[1]
        if kind == "null":
            return None
        if kind == "array":
            return [self.value(x) for x in e[1]]
        if kind == "object":
            out: dict[str, Any] = {}
            for k, v in e[1]:
                key = k if isinstance(k, str) else f"[{self.expr(k)}]"
                out[key] = self.value(v)
            return out
        if kind == "call" and e[1] == "loadTextContent":
            return self.value(("str", [self.load_text(e[2])]))
        return f"[{self.expr(e)}]"

    # the template
    def template(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {"_generator": dict(GENERATOR)}
        parameters: dict[str, Any] = {}
        variables: dict[str, Any] = {}
        copies: list[dict[str, Any]] = []
        resources: list[dict[str, Any]] = []
        modules: list[dict[str, Any]] = []
        outputs: dict[str, Any] = {}
        with self.located():
            for stmt in self.stmts:
                self.line = stmt["line"]
                self.statement(
                    stmt, metadata, parameters, variables, copies, resources, modules, outputs
                )
            self.line = None
        template: dict[str, Any] = {"$schema": SCHEMA, "contentVersion": "1.0.0.0"}
        template["metadata"] = metadata
        if parameters:
            template["parameters"] = parameters
        if copies:
            variables = {"copy": copies, **variables}
        if variables:
            template["variables"] = variables
        template["resources"] = resources + modules
        if outputs:
            template["outputs"] = outputs
        return template

    def statement(
        self,
        stmt: dict[str, Any],
        metadata: dict[str, Any],
        parameters: dict[str, Any],
        variables: dict[str, Any],
        copies: list[dict[str, Any]],
        resources: list[dict[str, Any]],
        modules: list[dict[str, Any]],
        outputs: dict[str, Any],
    ) -> None:
        if True:
            kind = stmt["kind"]
            if kind == "metadata":
                metadata[stmt["name"]] = self.value(stmt["value"])
            elif kind == "param":
                parameters[stmt["name"]] = self.parameter(stmt)
            elif kind == "var" and not self.symbols[stmt["name"]].runtime:
                if stmt["value"][0] == "for":
                    copies.append(self.copy(stmt["name"], stmt["value"]))
                else:
                    variables[stmt["name"]] = self.value(stmt["value"])
            elif kind == "resource":
                resources.append(self.resource(stmt))
            elif kind == "module":  # after every resource, as bicep build writes them
                modules.append(self.module(stmt))
            elif kind == "output":
                output: dict[str, Any] = {"type": _PARAM_TYPES[stmt["type"]]}
                if stmt["value"][0] == "for":  # an output copy loop: copyIndex() unnamed
                    source, body = self.for_expression(stmt["value"], "copyIndex()")
                    output["copy"] = {"count": f"[length({source})]", "input": body}
                else:
                    output["value"] = self.value(stmt["value"])
                output.update(self.decorations(stmt, output_only=True))
                outputs[stmt["name"]] = output

    def copy(self, name: str, loop: Any) -> dict[str, Any]:
        """A variable made by a for-expression: ARM's variable copy loop."""
        source, body = self.for_expression(loop, f"copyIndex({_quote(name)})")
        return {"name": name, "count": f"[length({source})]", "input": body}

    def for_expression(self, loop: Any, index: str) -> tuple[str, Any]:
        """A variable's or output's for-expression: its array and its body with the item as
        ``array[index]`` and the index as ``index`` (ARM's copyIndex, named for a variable)."""
        _, item, position, iterable, body, condition = loop
        if condition is not None:
            raise BicepError("a condition in a for-expression (a filter)")
        source = self.expr(iterable)
        saved = self.loop
        self.loop = {**saved, item: f"{source}[{index}]"}
        if position is not None:
            self.loop[position] = index
        try:
            return source, self.value(body)
        finally:
            self.loop = saved

    def decorations(self, stmt: dict[str, Any], output_only: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, args in stmt["decorators"]:
            if name == "description":
                out.setdefault("metadata", {})["description"] = self.value(args[0])
            elif output_only:
                raise BicepError(f"the decorator @{name} on output {stmt['name']}")
        return out

    def parameter(self, stmt: dict[str, Any]) -> dict[str, Any]:
        decorators = dict(stmt["decorators"])
        ptype = _PARAM_TYPES[stmt["type"]]
        if "secure" in decorators:
            ptype = {"string": "securestring", "object": "secureObject"}[ptype]
        param: dict[str, Any] = {"type": ptype}
        if "default" in stmt:
            param["defaultValue"] = self.value(stmt["default"])
        for name, args in stmt["decorators"]:
            if name in _DECORATOR_KEYS:
                param[_DECORATOR_KEYS[name]] = self.value(args[0])
            elif name not in ("description", "secure"):
                raise BicepError(f"the decorator @{name} on parameter {stmt['name']}")
        param.update(self.decorations(stmt))
        return param

    def depends_on(self, stmt: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
        """The resources and modules a statement's ``keys`` refer to (its name included), and
        its explicit dependsOn, ordered by symbol name as bicep build lists them. A collection
        named whole is its copy loop's name; one named by index (``mods[i]``) is that item's
        resourceId, unless the whole collection is named too."""
        body = stmt["value"]
        if "condition" in stmt and self._dependencies(stmt["condition"]):
            raise BicepError(f"a {stmt['kind']} condition that reads a resource or module")
        refs = self._dependencies(("object", [(k, v) for k, v in body[1] if k in keys]))
        explicit = self._prop(body, "dependsOn")
        for item in explicit[1] if explicit is not None else []:
            if item[0] == "index":
                target = self._symbol_ref(item[1], "resource|module", "dependsOn")
                if not target.looped:
                    raise BicepError("dependsOn: an index into something other than a loop")
                refs.append((item[1][1], item[2]))
            else:
                self._symbol_ref(item, "resource|module", "dependsOn")
                refs.append((item[1], None))
        out: list[str] = []
        for name in sorted({n for n, _ in refs} - {stmt["name"]}, key=lambda n: (n.lower(), n)):
            indices = [i for n, i in refs if n == name]
            if not self.symbols[name].looped:
                out.append(f"[{self.resource_id(name)}]")
            elif None in indices:  # the whole collection
                out.append(name)
            else:  # one entry per indexed reference, alike or refused (their order is not fixed)
                items = [f"[{self.resource_id(name, self.expr(i))}]" for i in indices]
                if len(set(items)) > 1:
                    raise BicepError(f"the collection {name} named by different indices")
                out += items
        return out

    def collection(self, stmt: dict[str, Any], emit: Any) -> dict[str, Any]:
        """A resource or module, with ARM's copy loop first if it is a collection: emitted at
        copyIndex(), ``@batchSize(n)`` as a serial copy of n at a time."""
        if "loop" not in stmt:
            return dict(emit(stmt))
        with self.bound(stmt, "copyIndex()") as source:
            out = emit(stmt)
        copy: dict[str, Any] = {"name": stmt["name"], "count": f"[length({source})]"}
        for name, args in stmt["decorators"]:
            if name == "batchSize":
                copy.update(mode="serial", batchSize=args[0][1])
        return {"copy": copy, **out}

    def resource(self, stmt: dict[str, Any]) -> dict[str, Any]:
        return self.collection(stmt, self._resource)

    def module(self, stmt: dict[str, Any]) -> dict[str, Any]:
        return self.collection(stmt, self._module)

    def _resource(self, stmt: dict[str, Any]) -> dict[str, Any]:
        symbol = self.symbols[stmt["name"]]
        body = stmt["value"]
        res: dict[str, Any] = {"type": symbol.resource_type, "apiVersion": symbol.api_version}
        if "condition" in stmt:
            res = {"condition": f"[{self.expr(stmt['condition'])}]", **res}
        scope = self._prop(body, "scope")
        if scope is not None:
            target = self._symbol_ref(scope, "resource", "scope")
            if self._prop(target.stmt["value"], "scope") is not None:
                raise BicepError("scope: an extension resource (one with a scope of its own)")
            res["scope"] = (
                f"[format({_quote(target.resource_type + '/{0}')}, {self.full_name(scope[1])})]"
            )
        res["name"] = f"[{self.full_name(stmt['name'])}]"
        for key, value in body[1]:
            if key in ("name", "parent", "scope", "dependsOn"):
                continue
            res[key] = self.value(value)
        if (
            res["name"].startswith("['")
            and res["name"].endswith("']")
            and "'" not in res["name"][2:-2]
        ):
            res["name"] = res["name"][2:-2]
        deps = self.depends_on(stmt, tuple(k for k, _ in body[1] if k != "dependsOn"))
        if deps:
            res["dependsOn"] = deps
        return res

    def _module(self, stmt: dict[str, Any]) -> dict[str, Any]:
        body = stmt["value"]
        inner = Compiler(self.path.parent / stmt["target"], self.deployments_api).template()
        inner["metadata"]["_generator"] = dict(GENERATOR)
        params_expr = self._prop(body, "params")
        params = {k: {"value": self.value(v)} for k, v in (params_expr[1] if params_expr else [])}
        res: dict[str, Any] = {
            **({"condition": f"[{self.expr(stmt['condition'])}]"} if "condition" in stmt else {}),
            "type": "Microsoft.Resources/deployments",
            "apiVersion": self.deployments_api,
            "name": self.value(self._prop(body, "name")),
            "properties": {
                "expressionEvaluationOptions": {"scope": "inner"},
                "mode": "Incremental",
                "parameters": params,
                "template": inner,
            },
        }
        deps = self.depends_on(stmt, ("name", "params"))
        if deps:
            res["dependsOn"] = deps
        return res


def compile_main() -> dict[str, Any]:
    return Compiler(MAIN).template()


def render(template: dict[str, Any]) -> str:
    return json.dumps(template, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    sources = [a for a in argv if a != "--check"]
    if sources:  # compile other files to stdout: the corpus, or a check before an edit
        for source in sources:
            try:
                print(render(Compiler(Path(source)).template()), end="")
            except BicepError as error:
                print(error, file=sys.stderr)
                return 2
        return 0
    stale = False
    for source, output in TARGETS:
        try:
            text = render(Compiler(source).template())
        except BicepError as error:
            print(error, file=sys.stderr)
            return 2
        if "--check" in argv:
            if output.read_text() != text:
                shown = output.relative_to(REPO) if output.is_relative_to(REPO) else output
                print(f"{shown} is stale: run scripts/bicep_to_arm.py")
                stale = True
            continue
        output.write_text(text)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
