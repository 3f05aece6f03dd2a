"""Compile infra/bicep/main.bicep to the ARM template the "Deploy to Azure" button deploys,
infra/bicep/azuredeploy.json, the way ``bicep build`` does it for the Bicep this repository
writes (a stand-in: no Bicep compiler installs on these machines; the GitHub workflow compiles
with the real one and fails when the two differ).

    .venv/bin/python scripts/bicep_to_arm.py           # rewrite infra/bicep/azuredeploy.json
    .venv/bin/python scripts/bicep_to_arm.py --check   # exit 1 if it is stale

What it covers, as ``bicep build`` emits it for a languageVersion 1.0 template: params with their
decorators, variables (a variable that reads a module's outputs is inlined where it is used, as
ARM variables cannot), resources (``parent``, ``scope``, implicit and explicit ``dependsOn``),
modules as nested ``Microsoft.Resources/deployments`` with ``expressionEvaluationOptions.scope:
inner``, conditions (``= if (expr) {...}``) as ``condition``, outputs, string interpolation as
``format()``, operators as ARM functions, lambdas as
``lambda()``/``lambdaVariables()``, ``loadTextContent()`` inlined at compile time. Anything else
is an error, not a guess. Its own parser is independent of pycep-parser, which the tests use to
read main.bicep.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BICEP_DIR = REPO / "infra" / "bicep"
MAIN = BICEP_DIR / "main.bicep"
OUTPUT = BICEP_DIR / "azuredeploy.json"
SCHEMA = "https://schema.management.azure.com/schemas/2019-04-01/deploymentTemplate.json#"
DEPLOYMENTS_API = "2022-09-01"
"""The api-version ``bicep build`` (0.34) gives module deployments."""
GENERATOR = {"name": "bicep", "version": "0.34.44.8038", "templateHash": "0"}
"""The Bicep CLI version the workflow pins; templateHash is left out of every comparison."""


class BicepError(Exception):
    pass


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
            end = text.index("*/", i)
            line += text.count("\n", i, end)
            i = end + 2
        elif c == "#" and (not toks or toks[-1].kind == "nl"):  # #disable-next-line ...
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("'''", i):
            end = text.index("'''", i + 3)
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
                raise BicepError(f"line {line}: unexpected character {c!r}")
    toks.append(Tok("eof", None, line))
    return toks


def _string(text: str, i: int, line: int) -> tuple[list[Any], int, int]:
    """A single-quoted string from just after its quote: literal pieces and interpolated
    token lists, alternating."""
    parts: list[Any] = []
    buf: list[str] = []
    while True:
        c = text[i]
        if c == "'":
            parts.append("".join(buf))
            return parts, i + 1, line
        if c == "\n":
            raise BicepError(f"line {line}: newline in a string")
        if c == "\\":
            e = text[i + 1]
            if e == "u":
                end = text.index("}", i)
                buf.append(chr(int(text[i + 3 : end], 16)))
                i = end + 1
                continue
            if e not in _ESCAPES:
                raise BicepError(f"line {line}: unknown escape \\{e}")
            buf.append(_ESCAPES[e])
            i += 2
            continue
        if text.startswith("${", i):
            parts.append("".join(buf))
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
            raise BicepError(f"line {tok.line}: expected {value or kind}, got {tok.value!r}")
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
                    raise BicepError(f"line {tok.line}: interpolated {keyword} path")
                stmt["target"] = path[0]
                if self.peek().kind == "ident" and self.peek().value == "existing":
                    raise BicepError(f"line {tok.line}: existing resources are not supported")
                self.expect("op", "=")
                if self.peek().kind == "ident" and self.peek().value == "if":
                    self.next()
                    self.expect("op", "(")
                    stmt["condition"] = self.expression()
                    self.expect("op", ")")
                stmt["value"] = self.expression()
            else:
                raise BicepError(f"line {tok.line}: unsupported statement {keyword!r}")
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
                return ("call", tok.value, self.arguments())
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
                self.next()
                name = self.expect("ident").value
                keyword = self.expect("ident")
                if keyword.value != "in":
                    raise BicepError(f"line {keyword.line}: expected in")
                iterable = self.expression()
                self.expect("op", ":")
                self.skip_nl()
                body = self.expression()
                self.skip_nl()
                self.expect("op", "]")
                return ("for", name, iterable, body)
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
                    raise BicepError(f"line {key_tok.line}: bad object key {key_tok.value!r}")
                self.expect("op", ":")
                self.skip_nl()
                props.append((key, self.expression()))
                if self.is_op(","):
                    self.next()
                self.skip_nl()
            self.next()
            return ("object", props)
        raise BicepError(f"line {tok.line}: unexpected {tok.value!r}")

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
_DECORATOR_KEYS = {"minValue": "minValue", "maxValue": "maxValue", "minLength": "minLength",
                   "maxLength": "maxLength", "allowed": "allowedValues"}  # fmt: skip


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


class Compiler:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.stmts = Parser(tokenize(path.read_text())).statements()
        self.symbols: dict[str, Symbol] = {}
        self.loop: dict[str, str] = {}
        """A for-expression's variable -> its ARM expression (the item at copyIndex)."""
        for stmt in self.stmts:
            kind = stmt["kind"]
            if kind in ("param", "var", "resource", "module"):
                symbol = Symbol(kind, stmt)
                if kind == "resource":
                    symbol.resource_type, _, symbol.api_version = stmt["target"].partition("@")
                self.symbols[stmt["name"]] = symbol
        for symbol in self.symbols.values():
            if symbol.kind == "resource":
                parent = self._prop(symbol.stmt["value"], "parent")
                if parent is not None and "/" not in symbol.resource_type:
                    symbol.resource_type = (
                        self.symbols[parent[1]].resource_type + "/" + symbol.resource_type
                    )
        for symbol in self.symbols.values():
            if symbol.kind == "var":
                symbol.runtime = self._is_runtime(symbol.stmt["value"], set())

    # helpers
    @staticmethod
    def _prop(obj: Any, key: str) -> Any:
        if obj[0] != "object":
            raise BicepError("expected an object")
        for k, v in obj[1]:
            if k == key:
                return v
        return None

    def _is_runtime(self, e: Any, seen: set[str]) -> bool:
        """Does the expression read a module's outputs or a resource's runtime properties?"""
        found = False

        def visit(node: Any, lambdas: frozenset[str]) -> None:
            nonlocal found
            if not isinstance(node, tuple):
                return
            if node[0] == "prop" and node[1][0] == "ident":
                target = self.symbols.get(node[1][1])
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
                    and self._is_runtime(target.stmt["value"], seen | {node[1]})
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

    def _dependencies(self, e: Any, lambdas: frozenset[str] = frozenset()) -> list[str]:
        """Resource and module symbols an expression refers to, through variables too."""
        found: list[str] = []

        def add(name: str) -> None:
            if name not in found:
                found.append(name)

        def visit(node: Any, lambdas: frozenset[str]) -> None:
            if isinstance(node, list):
                for item in node:
                    visit(item, lambdas)
                return
            if not isinstance(node, tuple):
                return
            if node[0] == "ident" and node[1] not in lambdas:
                target = self.symbols.get(node[1])
                if target and target.kind in ("resource", "module"):
                    add(node[1])
                elif target and target.kind == "var":
                    for d in self._dependencies(target.stmt["value"]):
                        add(d)
                return
            if node[0] == "lambda":
                visit(node[2], lambdas | set(node[1]))
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
            return self.call(e[1], e[2], lambdas)
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
                raise BicepError("case-insensitive comparison is not supported")
            return f"{_BINARY[op]}({a}, {b})"
        if kind == "ternary":
            parts = (self.expr(x, lambdas) for x in e[1:])
            return f"if({', '.join(parts)})"
        if kind == "lambda":
            inner = lambdas | set(e[1])
            names = ", ".join(_quote(n) for n in e[1])
            return f"lambda({names}, {self.expr(e[2], inner)})"
        raise BicepError(f"cannot compile {e!r}")

    def ident(self, name: str, lambdas: frozenset[str]) -> str:
        if name in lambdas:
            return f"lambdaVariables({_quote(name)})"
        if name in self.loop:
            return self.loop[name]
        symbol = self.symbols.get(name)
        if symbol is None:
            raise BicepError(f"{self.path.name}: unknown name {name}")
        if symbol.kind == "param":
            return f"parameters({_quote(name)})"
        if symbol.kind == "var":
            if symbol.runtime:
                return self.expr(symbol.stmt["value"], frozenset())
            return f"variables({_quote(name)})"
        raise BicepError(f"{self.path.name}: {name} used as a value")

    def call(self, name: str, args: list[Any], lambdas: frozenset[str]) -> str:
        if name == "loadTextContent":
            return _quote(self.load_text(args))
        return f"{name}({', '.join(self.expr(a, lambdas) for a in args)})"

    def load_text(self, args: list[Any]) -> str:
        if len(args) != 1 or args[0][0] != "str" or len(args[0][1]) != 1:
            raise BicepError("loadTextContent takes one literal path")
        return (self.path.parent / args[0][1][0]).read_text()

    def resource_id(self, name: str) -> str:
        symbol = self.symbols[name]
        if symbol.kind == "module":
            mod_name = self.expr(self._prop(symbol.stmt["value"], "name"))
            return f"resourceId('Microsoft.Resources/deployments', {mod_name})"
        return f"resourceId({', '.join([_quote(symbol.resource_type), *self.name_parts(name)])})"

    def name_parts(self, name: str) -> list[str]:
        symbol = self.symbols[name]
        body = symbol.stmt["value"]
        parent = self._prop(body, "parent")
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
        chain: list[str] = []
        node = e
        while node[0] == "prop":
            chain.insert(0, node[2])
            node = node[1]
        if node[0] == "ident" and node[1] not in lambdas and node[1] in self.symbols:
            symbol = self.symbols[node[1]]
            if symbol.kind == "resource":
                if chain == ["id"]:
                    return self.resource_id(node[1])
                if chain == ["name"]:  # a child's own name, as Bicep gives it
                    return self.name_parts(node[1])[-1]
                if chain[0] == "properties":
                    ref = f"reference({self.resource_id(node[1])}, {_quote(symbol.api_version)})"
                    return ref + "".join(f".{c}" for c in chain[1:])
                raise BicepError(f"unsupported resource access {node[1]}.{'.'.join(chain)}")
            if symbol.kind == "module":
                if chain[0] != "outputs" or len(chain) < 2:
                    raise BicepError(f"unsupported module access {node[1]}.{'.'.join(chain)}")
                ref = f"reference({self.resource_id(node[1])}, {_quote(DEPLOYMENTS_API)})"
                return f"{ref}.outputs.{chain[1]}.value" + "".join(f".{c}" for c in chain[2:])
        return f"{self.expr(e[1], lambdas)}.{e[2]}"

    # JSON values: literals stay literals, everything else becomes "[expression]"
    def value(self, e: Any) -> Any:
        kind = e[0]
        if kind == "str" and len(e[1]) == 1:
            text = e[1][0]
            return "[" + text if text.startswith("[") else text
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
        outputs: dict[str, Any] = {}
        for stmt in self.stmts:
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
            elif kind == "module":
                resources.append(self.module(stmt))
            elif kind == "output":
                output: dict[str, Any] = {
                    "type": _PARAM_TYPES[stmt["type"]],
                    "value": self.value(stmt["value"]),
                }
                output.update(self.decorations(stmt, output_only=True))
                outputs[stmt["name"]] = output
        template: dict[str, Any] = {"$schema": SCHEMA, "contentVersion": "1.0.0.0"}
        template["metadata"] = metadata
        template["parameters"] = parameters
        if copies:
            variables = {"copy": copies, **variables}
        if variables:
            template["variables"] = variables
        template["resources"] = resources
        if outputs:
            template["outputs"] = outputs
        return template

    def copy(self, name: str, loop: Any) -> dict[str, Any]:
        """A variable made by a for-expression: ARM's variable copy loop."""
        _, item, iterable, body = loop
        source = self.expr(iterable)
        self.loop[item] = f"{source}[copyIndex({_quote(name)})]"
        try:
            return {"name": name, "count": f"[length({source})]", "input": self.value(body)}
        finally:
            del self.loop[item]

    def decorations(self, stmt: dict[str, Any], output_only: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, args in stmt["decorators"]:
            if name == "description":
                out.setdefault("metadata", {})["description"] = self.value(args[0])
            elif output_only:
                raise BicepError(f"decorator @{name} on output {stmt['name']}")
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
                raise BicepError(f"unsupported decorator @{name}")
        param.update(self.decorations(stmt))
        return param

    def depends_on(self, body: Any, exclude: set[str]) -> list[str]:
        names = [d for d in self._dependencies(body) if d not in exclude]
        explicit = self._prop(body, "dependsOn")
        if explicit is not None:
            for item in explicit[1]:
                if item[1] not in names:
                    names.append(item[1])
        return [f"[{self.resource_id(n)}]" for n in names]

    def skips(self, stmt: dict[str, Any]) -> list[str]:
        """The ``// checkov:skip=ID:reason`` comments of a resource's body, which checkov's ARM
        framework reads from the resource's ``metadata.checkov`` (``bicep build`` drops
        comments: the workflow's comparison leaves these out)."""
        lines = self.path.read_text().splitlines()
        found = []
        for line in lines[stmt["line"] : stmt["end"]]:
            m = re.match(r"\s*// (checkov:skip=[A-Z0-9_]+:.+)$", line)
            if m:
                found.append(m.group(1))
        return found

    def resource(self, stmt: dict[str, Any]) -> dict[str, Any]:
        symbol = self.symbols[stmt["name"]]
        body = stmt["value"]
        res: dict[str, Any] = {"type": symbol.resource_type, "apiVersion": symbol.api_version}
        if "condition" in stmt:
            res = {"condition": f"[{self.expr(stmt['condition'])}]", **res}
        scope = self._prop(body, "scope")
        if scope is not None:
            target = self.symbols[scope[1]]
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
        deps = self.depends_on(("object", [(k, v) for k, v in body[1] if k != "name"]), set())
        if deps:
            res["dependsOn"] = deps
        skips = self.skips(stmt)
        if skips:
            res["metadata"] = {"checkov": skips}
        return res

    def module(self, stmt: dict[str, Any]) -> dict[str, Any]:
        body = stmt["value"]
        inner = Compiler(self.path.parent / stmt["target"]).template()
        inner["metadata"]["_generator"] = dict(GENERATOR)
        params_expr = self._prop(body, "params")
        params = {k: {"value": self.value(v)} for k, v in (params_expr[1] if params_expr else [])}
        res: dict[str, Any] = {
            **({"condition": f"[{self.expr(stmt['condition'])}]"} if "condition" in stmt else {}),
            "type": "Microsoft.Resources/deployments",
            "apiVersion": DEPLOYMENTS_API,
            "name": self.value(self._prop(body, "name")),
            "properties": {
                "expressionEvaluationOptions": {"scope": "inner"},
                "mode": "Incremental",
                "parameters": params,
                "template": inner,
            },
        }
        deps = self.depends_on(("object", [(k, v) for k, v in body[1] if k == "params"]), set())
        explicit = self._prop(body, "dependsOn")
        if explicit is not None:
            for item in explicit[1]:
                dep = f"[{self.resource_id(item[1])}]"
                if dep not in deps:
                    deps.append(dep)
        if deps:
            res["dependsOn"] = deps
        return res


def compile_main() -> dict[str, Any]:
    return Compiler(MAIN).template()


def render(template: dict[str, Any]) -> str:
    return json.dumps(template, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = render(compile_main())
    if "--check" in argv:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(REPO)} is stale: run scripts/bicep_to_arm.py")
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
