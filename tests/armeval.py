"""A small evaluator of ARM template expressions, for the tests of infra/bicep/azuredeploy.json.

Resource Manager cannot run here, so the template's checks, custom data and resource bodies are
evaluated by this module, with the semantics Microsoft documents for each function (Template
functions reference, learn.microsoft.com/azure/azure-resource-manager/templates/):

- ``if()`` evaluates only the branch it takes; ``and()``/``or()`` evaluate every argument (the
  docs promise no short-circuit, so a template must not rely on one: an argument that fails on a
  bad input fails here too);
- ``contains()`` compares strings and array items case-sensitively, object keys
  case-insensitively; ``indexOf()``, ``startsWith()``, ``endsWith()`` ignore case;
- ``substring()`` fails outside the string, array indexes fail outside the array, ``int()`` fails
  on anything but an integer;
- ``string()`` of an object or array is its compact JSON; ``div``/``mod`` truncate toward zero
  (.NET); integers are 64-bit;
- ``lambda()``/``lambdaVariables()`` as filter() uses them, variable copy loops (``copyIndex``)
  of at most 800 iterations, resource and module copy loops (each item a resource of its own,
  ``copyIndex()`` its index; a ``dependsOn`` naming the loop waits for every item) and output
  copy loops;
- a nested deployment with ``subscriptionId``/``resourceGroup`` runs in that resource group:
  ``resourceGroup()`` and ``resourceId()`` answer there and its id (``extensionResourceId()``
  off the group, what a ``dependsOn`` names) is there; the group's region is taken to be this
  one's (nothing here reads another group's location);
- numbers: integers, and fractions where a value holds one (a Spot price, ``json('0.25')``), which
  comparisons take as they are.

Only the functions the template uses are here; an unknown one is an error, so adding a function
to the template means adding it here, deliberately. What cannot be known offline is a stand-in,
said so where it is: ``uniqueString``/``guid`` are deterministic hashes (not Azure's algorithm),
``reference()`` answers from what the caller says the deployed resources report (an
:class:`Unresolved` where it cannot know, as a what-if before the deployment).

This module reads the template as JSON: it shares no code with scripts/bicep_to_arm.py.
"""

from __future__ import annotations

import base64
import datetime
import functools
import hashlib
import json
import re
import string
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any


class ArmError(Exception):
    """What Resource Manager would refuse: a failing function, a bad parameter value."""


class Unresolved(str):
    """A value known only once deployed (a ``reference()`` a what-if cannot answer): the
    expression as text, which a property or an index of it extends (``[reference(ID)].x``)."""

    def at(self, key: Any) -> Unresolved:
        return Unresolved(f"{self}.{key}")


# -- expressions ---------------------------------------------------------------------------------
_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>[(),.\[\]]))"
)


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    end = len(text.rstrip())  # (the token pattern skips the blanks before a token)
    while pos < end:
        m = _TOKEN.match(text, pos)
        if not m:
            raise ArmError(f"cannot read expression at {text[pos : pos + 30]!r}")
        pos = m.end()
        kind = m.lastgroup
        value = m.group(kind)
        if kind == "str":
            value = value[1:-1].replace("''", "'")
        elif kind == "num":
            value = int(value)
        out.append((kind, value))
    out.append(("end", None))
    return out


class _Parser:
    """ARM expression syntax: literals, calls, ``.property`` and ``[index]``."""

    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.pos = 0

    def take(self, kind: str, value: Any = None) -> Any:
        k, v = self.toks[self.pos]
        if k != kind or (value is not None and v != value):
            raise ArmError(f"expected {value or kind}, got {v!r}")
        self.pos += 1
        return v

    def peek(self) -> tuple[str, Any]:
        return self.toks[self.pos]

    def parse(self) -> Any:
        e = self.expr()
        self.take("end")
        return e

    def expr(self) -> Any:
        kind, value = self.peek()
        if kind == "str":
            self.pos += 1
            node: Any = ("lit", value)
        elif kind == "num":
            self.pos += 1
            node = ("lit", value)
        elif kind == "name":
            self.pos += 1
            self.take("op", "(")
            args = []
            while self.peek() != ("op", ")"):
                args.append(self.expr())
                if self.peek() == ("op", ","):
                    self.pos += 1
            self.pos += 1
            node = ("call", value, tuple(args))
        else:
            raise ArmError(f"unexpected {value!r}")
        while True:
            if self.peek() == ("op", "."):
                self.pos += 1
                node = ("prop", node, self.take("name"))
            elif self.peek() == ("op", "["):
                self.pos += 1
                index = self.expr()
                self.take("op", "]")
                node = ("index", node, index)
            else:
                return node


def is_expression(value: Any) -> bool:
    return (
        isinstance(value, str)
        and value.startswith("[")
        and not value.startswith("[[")
        and (value.endswith("]"))
    )


@functools.lru_cache(maxsize=8192)
def parse_expression(value: str) -> Any:
    """The syntax tree of an expression string (nested tuples: one parse per distinct string,
    however often a template is deployed)."""
    return _Parser(value[1:-1]).parse()


# -- values ----------------------------------------------------------------------------------
def _type_name(v: Any) -> str:
    if isinstance(v, bool):
        return "Boolean"
    if isinstance(v, int):
        return "Integer"
    if isinstance(v, str):
        return "String"
    if isinstance(v, list):
        return "Array"
    if isinstance(v, dict):
        return "Object"
    return "Null"


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ArmError(f"expected an integer, got {_type_name(v)} {v!r}")
    if not -(2**63) <= v < 2**63:
        raise ArmError(f"integer out of range: {v}")
    return v


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ArmError(f"expected a string, got {_type_name(v)} {v!r}")
    return v


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ArmError(f"expected a boolean, got {_type_name(v)} {v!r}")
    return v


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        if {k.lower() for k in a} != {k.lower() for k in b}:
            return False
        lower_b = {k.lower(): v for k, v in b.items()}
        return all(_equal(v, lower_b[k.lower()]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _to_string(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if v is None:
        return ""
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _format(fmt: str, args: list[Any]) -> str:
    """.NET composite formatting: {n} and {{ }}."""
    out, i = [], 0
    while i < len(fmt):
        c = fmt[i]
        if c == "{":
            if fmt.startswith("{{", i):
                out.append("{")
                i += 2
                continue
            end = fmt.index("}", i)
            out.append(_to_string(args[int(fmt[i + 1 : end])]))
            i = end + 1
        elif c == "}":
            if not fmt.startswith("}}", i):
                raise ArmError(f"bad format string {fmt!r}")
            out.append("}")
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _div(a: int, b: int) -> int:
    if b == 0:
        raise ArmError("division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _mod(a: int, b: int) -> int:
    return a - b * _div(a, b)


def _duration(text: str) -> datetime.timedelta:
    m = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?", text)
    if not m or text in ("P", "PT"):
        raise ArmError(f"not an ISO 8601 duration: {text!r}")
    d, h, mi, s = (int(x) if x else 0 for x in m.groups())
    return datetime.timedelta(days=d, hours=h, minutes=mi, seconds=s)


def _parse_time(text: str) -> datetime.datetime:
    t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)


@dataclass
class Lambda:
    names: list[str]
    body: Any
    scope: Scope

    def __call__(self, *args: Any) -> Any:
        bound = dict(self.scope.lambda_vars)
        bound.update(zip(self.names, args, strict=False))
        return self.scope.child(bound).eval(self.body)


# What environment() answers in each of Azure's clouds (`az cloud show -n NAME`; only the fields
# the stacks and their tests read).
CLOUDS: dict[str, dict[str, Any]] = {
    "AzureCloud": {
        "resourceManager": "https://management.azure.com/",
        "authentication": {"loginEndpoint": "https://login.microsoftonline.com/"},
        "suffixes": {"keyvaultDns": ".vault.azure.net", "storage": "core.windows.net"},
    },
    "AzureUSGovernment": {
        "resourceManager": "https://management.usgovcloudapi.net/",
        "authentication": {"loginEndpoint": "https://login.microsoftonline.us/"},
        "suffixes": {
            "keyvaultDns": ".vault.usgovcloudapi.net",
            "storage": "core.usgovcloudapi.net",
        },
    },
    "AzureChinaCloud": {
        "resourceManager": "https://management.chinacloudapi.cn/",
        "authentication": {"loginEndpoint": "https://login.chinacloudapi.cn/"},
        "suffixes": {"keyvaultDns": ".vault.azure.cn", "storage": "core.chinacloudapi.cn"},
    },
}


@dataclass
class Context:
    """What a deployment knows about where it runs."""

    subscription_id: str = "00000000-0000-0000-0000-000000000001"
    tenant_id: str = "00000000-0000-0000-0000-0000000000aa"
    resource_group: str = "rg-ray"
    location: str = "westeurope"
    deployment_time: str = "2026-11-23T10:00:00Z"
    new_guids: list[str] = field(
        default_factory=lambda: [
            "3f2504e0-4f89-41d3-9a0c-0305e82c3301",
            "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        ]
    )
    runtime: Callable[[str, str], dict[str, Any]] | None = None
    """(resource type, resource id) -> the properties a deployed resource reports."""
    cloud: str = "AzureCloud"
    """The cloud deployed to: a key of CLOUDS, what environment() answers."""

    def resource_group_id(self) -> str:
        return f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"


class Scope:
    """Parameters, variables and lambda variables of one template being evaluated."""

    def __init__(
        self,
        template: Mapping[str, Any],
        parameters: Mapping[str, Any],
        context: Context,
        deployments: Mapping[str, Mapping[str, Any]] | None = None,
        lambda_vars: Mapping[str, Any] | None = None,
        variables_cache: dict[str, Any] | None = None,
    ) -> None:
        self.template = template
        self.parameters = parameters
        self.context = context
        self.deployments = deployments if deployments is not None else {}
        self.lambda_vars = dict(lambda_vars or {})
        self.cache = variables_cache if variables_cache is not None else {}
        self.calls: set[str] = set()
        self.copy_index: dict[str, int] = {}

    def child(self, lambda_vars: Mapping[str, Any]) -> Scope:
        s = Scope(
            self.template,
            self.parameters,
            self.context,
            self.deployments,
            lambda_vars,
            self.cache,
        )
        s.calls = self.calls
        s.copy_index = self.copy_index
        return s

    # JSON values
    def value(self, v: Any) -> Any:
        if is_expression(v):
            return self.eval(parse_expression(v))
        if isinstance(v, str) and v.startswith("[["):
            return v[1:]
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {self.value(k): self.value(x) for k, x in v.items()}
        return v

    def variable(self, name: str) -> Any:
        if name not in self.cache:
            variables = self.template.get("variables", {})
            copies = {c["name"]: c for c in variables.get("copy", [])}
            if name == "copy" or (name not in variables and name not in copies):
                raise ArmError(f"the template has no variable {name!r}")
            self.cache[name] = _PENDING
            scope = Scope(
                self.template, self.parameters, self.context, self.deployments, None, self.cache
            )
            scope.calls = self.calls
            if name in copies:
                self.cache[name] = scope.copy_loop(copies[name])
            else:
                self.cache[name] = scope.value(variables[name])
        if self.cache[name] is _PENDING:
            raise ArmError(f"variable {name!r} refers to itself")
        return self.cache[name]

    def copy_loop(self, copy: Mapping[str, Any]) -> list[Any]:
        """A variable copy loop: ``input`` evaluated for each copyIndex(name) below ``count``
        (at most 800, Resource Manager's limit on a copy loop)."""
        count = _int(self.value(copy["count"]))
        if not 0 <= count <= 800:
            raise ArmError(f"copy loop {copy['name']!r}: count {count} is not within 0-800")
        items = []
        for index in range(count):
            self.copy_index[copy["name"]] = index
            items.append(self.value(copy["input"]))
        self.copy_index.pop(copy["name"], None)
        return items

    # expressions
    def eval(self, node: Any) -> Any:
        kind = node[0]
        if kind == "lit":
            return node[1]
        if kind == "prop":
            target = self.eval(node[1])
            if isinstance(target, Unresolved):
                return target.at(node[2])
            if not isinstance(target, dict):
                raise ArmError(f"property {node[2]!r} of a {_type_name(target)}")
            for k, v in target.items():
                if k.lower() == node[2].lower():
                    return v
            raise ArmError(f"the object has no property {node[2]!r} (has {sorted(target)})")
        if kind == "index":
            target, index = self.eval(node[1]), self.eval(node[2])
            if isinstance(target, Unresolved):
                return target.at(f"[{index}]")
            if isinstance(target, list):
                i = _int(index)
                if not 0 <= i < len(target):
                    raise ArmError(f"index {i} outside an array of {len(target)}")
                return target[i]
            if isinstance(target, dict):
                key = _str(index)
                for k, v in target.items():
                    if k.lower() == key.lower():
                        return v
                raise ArmError(f"the object has no property {key!r}")
            raise ArmError(f"index into a {_type_name(target)}")
        name, args = node[1], node[2]
        self.calls.add(name.lower())
        lazy = _LAZY.get(name.lower())
        if lazy:
            return lazy(self, args)
        fn = _FUNCTIONS.get(name.lower())
        if fn is None:
            raise ArmError(f"function {name}() is not known to this evaluator")
        return fn(self, *[self.eval(a) for a in args])


_PENDING = object()


def _if(scope: Scope, args: Sequence[Any]) -> Any:
    return scope.eval(args[1]) if _bool(scope.eval(args[0])) else scope.eval(args[2])


def _lambda(scope: Scope, args: Sequence[Any]) -> Lambda:
    names = [_str(scope.eval(a)) for a in args[:-1]]
    return Lambda(names, args[-1], scope)


def _copy_index(scope: Scope, args: Sequence[Any]) -> int:
    # copyIndex() without a name: the resource's (or output's) own loop.
    name = _str(scope.eval(args[0])) if args else ""
    if name not in scope.copy_index:
        raise ArmError(f"copyIndex({name!r}) outside its copy loop")
    return scope.copy_index[name]


def _lambda_variables(scope: Scope, args: Sequence[Any]) -> Any:
    name = _str(scope.eval(args[0]))
    if name not in scope.lambda_vars:
        raise ArmError(f"lambdaVariables({name!r}) outside its lambda")
    return scope.lambda_vars[name]


_LAZY: dict[str, Callable[[Scope, Sequence[Any]], Any]] = {
    "if": _if,
    "lambda": _lambda,
    "lambdavariables": _lambda_variables,
    "copyindex": _copy_index,
}


def _parameters(scope: Scope, name: str) -> Any:
    if name not in scope.parameters:
        raise ArmError(f"the template has no parameter {name!r}")
    return scope.parameters[name]


def _contains(_: Scope, container: Any, item: Any) -> bool:
    if isinstance(container, str):
        return _to_string(item) in container
    if isinstance(container, list):
        return any(_equal(x, item) for x in container)
    if isinstance(container, dict):
        return _str(item).lower() in {k.lower() for k in container}
    raise ArmError(f"contains() of a {_type_name(container)}")


def _length(_: Scope, v: Any) -> int:
    if isinstance(v, str | list | dict):
        return len(v)
    raise ArmError(f"length() of a {_type_name(v)}")


def _empty(_: Scope, v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, str | list | dict):
        return len(v) == 0
    raise ArmError(f"empty() of a {_type_name(v)}")


def _take(_: Scope, v: Any, n: Any) -> Any:
    n = max(_int(n), 0)
    if isinstance(v, str | list):
        return v[:n]
    raise ArmError(f"take() of a {_type_name(v)}")


def _skip(_: Scope, v: Any, n: Any) -> Any:
    n = max(_int(n), 0)
    if isinstance(v, str | list):
        return v[n:]
    raise ArmError(f"skip() of a {_type_name(v)}")


def _substring(_: Scope, s: Any, start: Any, length: Any = None) -> str:
    s, start = _str(s), _int(start)
    length = len(s) - start if length is None else _int(length)
    if start < 0 or length < 0 or start + length > len(s):
        raise ArmError(
            "The index and length parameters must refer to a location within the string. "
            f"The index parameter: '{start}', the length parameter: '{length}', the length of "
            f"the string parameter: '{len(s)}'."
        )
    return s[start : start + length]


def _int_fn(_: Scope, v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    text = _str(v).strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise ArmError(f"int() of {v!r}: the value cannot be converted to an integer")
    return _int(int(text))


def _last(_: Scope, v: Any) -> Any:
    if isinstance(v, str | list):
        if not v:
            raise ArmError("last() of an empty value")
        return v[-1]
    raise ArmError(f"last() of a {_type_name(v)}")


def _concat(_: Scope, *args: Any) -> Any:
    if all(isinstance(a, list) for a in args):
        return [x for a in args for x in a]
    if all(isinstance(a, str | int) and not isinstance(a, bool) for a in args):
        return "".join(_to_string(a) for a in args)
    raise ArmError("concat() mixes arrays and strings")


def _create_object(_: Scope, *args: Any) -> dict[str, Any]:
    if len(args) % 2:
        raise ArmError("createObject() takes key/value pairs")
    return {_str(args[i]): args[i + 1] for i in range(0, len(args), 2)}


def _filter(_: Scope, array: Any, fn: Any) -> list[Any]:
    return [x for x in _array(array) if _bool(fn(x))]


def _to_object(_: Scope, array: Any, key: Any, value: Any = None) -> dict[str, Any]:
    return {_str(key(x)): (value(x) if value is not None else x) for x in _array(array)}


def _array(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise ArmError(f"expected an array, got {_type_name(v)}")
    return v


def _range(_: Scope, start: Any, count: Any) -> list[int]:
    start, count = _int(start), _int(count)
    if count < 0 or count > 10000:
        raise ArmError(f"range() count {count}: must be 0-10000")
    return list(range(start, start + count))


def _hash(*parts: Any) -> bytes:
    return hashlib.sha256("\x00".join(_to_string(p) for p in parts).encode()).digest()


def _unique_string(_: Scope, *parts: Any) -> str:
    """A stand-in: 13 lower-case letters and digits, deterministic (not Azure's hash)."""
    alphabet = string.ascii_lowercase + "234567"
    n = int.from_bytes(_hash(*parts)[:9], "big")
    return "".join(alphabet[(n >> (5 * i)) & 31] for i in range(13))


def _guid(_: Scope, *parts: Any) -> str:
    """A stand-in: a deterministic GUID (not Azure's algorithm)."""
    return str(uuid.UUID(bytes=_hash(*parts)[:16]))


def _resource_id(scope: Scope, rtype: Any, *names: Any) -> str:
    rtype = _str(rtype)
    segments = rtype.split("/")
    types = segments[1:]
    if len(types) != len(names):
        raise ArmError(f"resourceId({rtype!r}) needs {len(types)} names, got {len(names)}")
    path = "/".join(f"{t}/{_str(n)}" for t, n in zip(types, names, strict=True))
    return f"{scope.context.resource_group_id()}/providers/{segments[0]}/{path}"


def _extension_resource_id(_: Scope, parent: Any, rtype: Any, *names: Any) -> str:
    """The id of a resource of ``rtype`` under ``parent`` (a resource or resource group id)."""
    segments = _str(rtype).split("/")
    if len(segments) - 1 != len(names):
        raise ArmError(f"extensionResourceId({rtype!r}) needs {len(segments) - 1} names")
    path = "/".join(f"{t}/{_str(n)}" for t, n in zip(segments[1:], names, strict=True))
    return f"{_str(parent).rstrip('/')}/providers/{segments[0]}/{path}"


_GROUP_ID = re.compile(r"/subscriptions/([^/]+)/resourceGroups/([^/]+)", re.IGNORECASE)


def _elsewhere(scope: Scope, resource: Mapping[str, Any]) -> Context:
    """The context a nested deployment runs in: its ``subscriptionId``/``resourceGroup`` (another
    resource group, of this region: no deployment here creates one) or this deployment's."""
    if "subscriptionId" not in resource and "resourceGroup" not in resource:
        return scope.context
    sub = scope.value(resource.get("subscriptionId", scope.context.subscription_id))
    group = scope.value(resource.get("resourceGroup", scope.context.resource_group))
    for what, value in (("subscriptionId", sub), ("resourceGroup", group)):
        if not isinstance(value, str) or not value or "/" in value:
            raise ArmError(f"a nested deployment's {what} {value!r} is not a name")
    return replace(scope.context, subscription_id=sub, resource_group=group)


def _subscription_resource_id(scope: Scope, rtype: Any, *names: Any) -> str:
    segments = _str(rtype).split("/")
    path = "/".join(f"{t}/{_str(n)}" for t, n in zip(segments[1:], names, strict=True))
    return f"/subscriptions/{scope.context.subscription_id}/providers/{segments[0]}/{path}"


def _reference(scope: Scope, resource_id: Any, api_version: Any = None, *_: Any) -> Any:
    rid = _str(resource_id)
    if "/providers/Microsoft.Resources/deployments/" in rid:
        name = rid.rsplit("/", 1)[1]
        if name not in scope.deployments:
            raise ArmError(f"reference() to deployment {name!r} before it ran")
        return scope.deployments[name]
    if scope.context.runtime is None:
        raise ArmError(f"reference({rid!r}): nothing deployed to ask")
    rtype = "/".join(rid.split("/providers/", 1)[1].split("/")[0:2])
    return scope.context.runtime(rtype, rid)


def _date_time_add(_: Scope, base: Any, duration: Any, fmt: Any = None) -> str:
    t = _parse_time(_str(base)) + _duration(_str(duration))
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _date_time_to_epoch(_: Scope, text: Any) -> int:
    return int(_parse_time(_str(text)).timestamp())


def _new_guid(scope: Scope) -> str:
    if not scope.context.new_guids:
        raise ArmError("newGuid() called more often than the test expected")
    return scope.context.new_guids.pop(0)


def _base64(_: Scope, s: Any) -> str:
    return base64.b64encode(_str(s).encode()).decode()


def _number(v: Any) -> int | float:
    if isinstance(v, float):
        return v
    return _int(v)


def _union(_: Scope, *items: Any) -> Any:
    """Objects: every key, later ones over earlier ones (in first-seen order); arrays: every
    item once, in order."""
    if all(isinstance(i, dict) for i in items):
        merged: dict[str, Any] = {}
        for item in items:
            for k, v in item.items():
                same = [m for m in merged if m.lower() == k.lower()]
                merged[same[0] if same else k] = v
        return merged
    if all(isinstance(i, list) for i in items):
        found: list[Any] = []
        for item in items:
            found += [x for x in item if not any(_equal(x, f) for f in found)]
        return found
    raise ArmError("union() of values that are not all objects or all arrays")


def _compare(op: Callable[[Any, Any], bool]) -> Callable[[Scope, Any, Any], bool]:
    def compare(_: Scope, a: Any, b: Any) -> bool:
        if isinstance(a, str) and isinstance(b, str):
            return op(a, b)
        return op(_number(a), _number(b))

    return compare


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "parameters": _parameters,
    "variables": lambda s, name: s.variable(_str(name)),
    "true": lambda s: True,
    "false": lambda s: False,
    "null": lambda s: None,
    "not": lambda s, a: not _bool(a),
    "and": lambda s, *a: all([_bool(x) for x in a]),
    "or": lambda s, *a: any([_bool(x) for x in a]),
    "equals": lambda s, a, b: _equal(a, b),
    "less": _compare(lambda a, b: a < b),
    "lessorequals": _compare(lambda a, b: a <= b),
    "greater": _compare(lambda a, b: a > b),
    "greaterorequals": _compare(lambda a, b: a >= b),
    "add": lambda s, a, b: _int(_int(a) + _int(b)),
    "sub": lambda s, a, b: _int(_int(a) - _int(b)),
    "mul": lambda s, a, b: _int(_int(a) * _int(b)),
    "div": lambda s, a, b: _div(_int(a), _int(b)),
    "mod": lambda s, a, b: _mod(_int(a), _int(b)),
    "length": _length,
    "min": lambda s, *a: min(_int(x) for x in a),
    "max": lambda s, *a: max(_int(x) for x in a),
    "union": _union,
    "json": lambda s, a: json.loads(_str(a)),
    "empty": _empty,
    "contains": _contains,
    "take": _take,
    "skip": _skip,
    "split": lambda s, a, d: _str(a).split(_str(d)),
    "replace": lambda s, a, old, new: _str(a).replace(_str(old), _str(new)),
    "trim": lambda s, a: _str(a).strip(),
    "tolower": lambda s, a: _str(a).lower(),
    "toupper": lambda s, a: _str(a).upper(),
    "substring": _substring,
    "indexof": lambda s, a, b: _str(a).lower().find(_str(b).lower()),
    "endswith": lambda s, a, b: _str(a).lower().endswith(_str(b).lower()),
    "last": _last,
    "string": lambda s, a: _to_string(a),
    "int": _int_fn,
    "format": lambda s, f, *a: _format(_str(f), list(a)),
    "concat": _concat,
    "createarray": lambda s, *a: list(a),
    "createobject": _create_object,
    "filter": _filter,
    "range": _range,
    "join": lambda s, a, d: _str(d).join(_str(x) for x in _array(a)),
    "base64": _base64,
    "resourcegroup": lambda s: {
        "id": s.context.resource_group_id(),
        "name": s.context.resource_group,
        "location": s.context.location,
    },
    "subscription": lambda s: {
        "id": f"/subscriptions/{s.context.subscription_id}",
        "subscriptionId": s.context.subscription_id,
        "tenantId": s.context.tenant_id,
    },
    "toobject": _to_object,
    "environment": lambda s: {"name": s.context.cloud, **CLOUDS[s.context.cloud]},
    "uniquestring": _unique_string,
    "guid": _guid,
    "resourceid": _resource_id,
    "subscriptionresourceid": _subscription_resource_id,
    "extensionresourceid": _extension_resource_id,
    "reference": _reference,
    "datetimeadd": _date_time_add,
    "datetimetoepoch": _date_time_to_epoch,
    "newguid": _new_guid,
    "utcnow": lambda s, *f: s.context.deployment_time,
}
KNOWN_FUNCTIONS = frozenset(_FUNCTIONS) | frozenset(_LAZY)


# -- parameters ---------------------------------------------------------------------------------
_TYPES = {
    "string": str,
    "securestring": str,
    "int": int,
    "bool": bool,
    "object": dict,
    "secureobject": dict,
    "array": list,
}


def check_parameter(name: str, spec: Mapping[str, Any], value: Any) -> str | None:
    """Resource Manager's validation of one parameter value against its declaration: the
    message it would give, or None."""
    ptype = spec["type"].lower()
    expected = _TYPES[ptype]
    wrong = isinstance(value, bool) != (expected is bool) or not isinstance(value, expected)
    if wrong:
        return (
            f"The provided value for the template parameter '{name}' is not valid. Expected a "
            f"value of type '{ptype}', but received a value of type '{_type_name(value)}'."
        )
    allowed = spec.get("allowedValues")
    if allowed is not None:
        items = value if ptype == "array" else [value]
        bad = [v for v in items if not any(_equal(v, a) for a in allowed)]
        if bad:
            return (
                f"The provided value for the template parameter '{name}' is not valid. The "
                f"value '{_to_string(bad if ptype == 'array' else bad[0])}' is not part of the "
                f"allowed value(s): '{','.join(_to_string(a) for a in allowed)}'."
            )
    if "minValue" in spec and value < spec["minValue"]:
        return f"The provided value for the template parameter '{name}' is not valid. Value must be at least {spec['minValue']}."  # noqa: E501
    if "maxValue" in spec and value > spec["maxValue"]:
        return f"The provided value for the template parameter '{name}' is not valid. Value must be at most {spec['maxValue']}."  # noqa: E501
    if "minLength" in spec and len(value) < spec["minLength"]:
        return f"The provided value for the template parameter '{name}' is not valid. Length must be at least {spec['minLength']}."  # noqa: E501
    if "maxLength" in spec and len(value) > spec["maxLength"]:
        return f"The provided value for the template parameter '{name}' is not valid. Length must be at most {spec['maxLength']}."  # noqa: E501
    return None


@dataclass
class Deployment:
    """One template deployed with some parameters: what was refused, and what was created."""

    refused: list[str] = field(default_factory=list)
    """Parameter validation messages, of this template and of every nested deployment."""
    resources: list[dict[str, Any]] = field(default_factory=list)
    """Every resource with its properties evaluated (nested deployments flattened), each with
    ``_deployment``: the name of the deployment it belongs to."""
    outputs: dict[str, Any] = field(default_factory=dict)
    module_parameters: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The parameter values each nested deployment received, by deployment name."""
    module_groups: dict[str, tuple[str, str]] = field(default_factory=dict)
    """The (subscription id, resource group) each nested deployment ran in, by deployment name."""
    functions: set[str] = field(default_factory=set)


def deploy(
    template: Mapping[str, Any],
    given: Mapping[str, Any],
    context: Context | None = None,
    stop_when_refused: bool = True,
    _name: str = "main",
    _result: Deployment | None = None,
) -> Deployment:
    """Validate ``given`` against the template's parameters and evaluate everything in the
    order of ``dependsOn``, as Resource Manager would; nested inner-scope deployments are
    deployed recursively. Resources answer ``reference()`` through ``context.runtime``."""
    context = context or Context()
    result = _result or Deployment()
    declared = template.get("parameters", {})
    unknown = set(given) - set(declared)
    if unknown:
        result.refused.append(f"{_name}: unknown parameters {sorted(unknown)}")
        return result
    values, bootstrap = _parameter_values(template, given, context, _name, result.refused)
    if result.refused and stop_when_refused:
        return result
    deployments: dict[str, Any] = {}
    scope = Scope(template, values, context, deployments)
    for resource, index in _in_dependency_order(scope, _instances(scope, template)):
        _at(scope, index)
        if "condition" in resource and not scope.value(resource["condition"]):
            continue
        name = scope.value(resource["name"])
        if resource["type"] == "Microsoft.Resources/deployments":
            props = resource["properties"]
            assert props["expressionEvaluationOptions"]["scope"] == "inner"
            params = {k: scope.value(v["value"]) for k, v in props.get("parameters", {}).items()}
            result.module_parameters[name] = params
            before = len(result.refused)
            # another resource group's deployment: its resources' ids and resourceGroup() there
            where = _elsewhere(scope, resource)
            result.module_groups[name] = (where.subscription_id, where.resource_group)
            inner = deploy(props["template"], params, where, stop_when_refused, name, result)
            if len(result.refused) > before and stop_when_refused:
                return result
            deployments[name] = {
                "outputs": {k: {"value": v} for k, v in inner.outputs.items()},
            }
            continue
        body = {k: scope.value(v) for k, v in resource.items() if k not in ("dependsOn",)}
        body["_deployment"] = _name
        result.resources.append(body)
    _at(scope, None)
    outputs = {k: _output(scope, v) for k, v in template.get("outputs", {}).items()}
    result.functions |= scope.calls | bootstrap.calls
    if _name == "main":
        result.outputs = outputs
        return result
    return Deployment(outputs=outputs)


def _parameter_values(
    template: Mapping[str, Any],
    given: Mapping[str, Any],
    context: Context,
    name: str,
    refused: list[str],
) -> tuple[dict[str, Any], Scope]:
    """Every parameter's value (given, else its default); problems appended to ``refused``."""
    values: dict[str, Any] = {}
    bootstrap = Scope(template, {}, context)
    for param, spec in template.get("parameters", {}).items():
        if param in given:
            values[param] = given[param]
        elif "defaultValue" in spec:
            bootstrap.parameters = values
            values[param] = bootstrap.value(spec["defaultValue"])
        else:
            refused.append(f"{name}: the template parameter '{param}' has no value")
            continue
        problem = check_parameter(param, spec, values[param])
        if problem:
            refused.append(problem)
    return values, bootstrap


def top_level_resources(
    template: Mapping[str, Any], given: Mapping[str, Any], context: Context | None = None
) -> list[tuple[str, str]]:
    """(type, name) of each resource the template itself deploys, in template order: copy loops
    one item per index, resources whose condition is false left out, nested deployments as
    themselves (what a deployment's operations and a what-if list). Raises ArmError where the
    parameters are refused."""
    context = context or Context()
    refused: list[str] = []
    values, _ = _parameter_values(template, given, context, "main", refused)
    if refused:
        raise ArmError(refused[0])
    scope = Scope(template, values, context)
    found = []
    for resource, index in _instances(scope, template):
        _at(scope, index)
        if "condition" in resource and not scope.value(resource["condition"]):
            continue
        found.append((str(resource["type"]), str(scope.value(resource["name"]))))
    _at(scope, None)
    return found


def _at(scope: Scope, index: int | None) -> None:
    """copyIndex() of the resource or output loop being evaluated (None: outside one)."""
    if index is None:
        scope.copy_index.pop("", None)
    else:
        scope.copy_index[""] = index


def _instances(
    scope: Scope, template: Mapping[str, Any]
) -> list[tuple[dict[str, Any], int | None]]:
    """Every resource, a copy loop as one item per index (at most 800, Resource Manager's
    limit)."""
    found: list[tuple[dict[str, Any], int | None]] = []
    for resource in template.get("resources", []):
        if "copy" not in resource:
            found.append((resource, None))
            continue
        count = _int(scope.value(resource["copy"]["count"]))
        if not 0 <= count <= 800:
            raise ArmError(
                f"copy loop {resource['copy']['name']!r}: count {count} is not within 0-800"
            )
        found += [(resource, i) for i in range(count)]
    return found


def _output(scope: Scope, spec: Mapping[str, Any]) -> Any:
    if "copy" not in spec:
        return scope.value(spec["value"])
    items = []
    for i in range(_int(scope.value(spec["copy"]["count"]))):
        _at(scope, i)
        items.append(scope.value(spec["copy"]["input"]))
    _at(scope, None)
    return items


def _in_dependency_order(
    scope: Scope, resources: list[tuple[dict[str, Any], int | None]]
) -> list[tuple[dict[str, Any], int | None]]:
    """Resources sorted so that each comes after what its dependsOn names (by resource id, or a
    copy loop by its name)."""
    ids = []
    for r, index in resources:
        _at(scope, index)
        names = r["name"]
        value = scope.value(names)
        parts = value.split("/")
        if r["type"] == "Microsoft.Resources/deployments":
            where = _elsewhere(scope, r)
            if where is not scope.context:  # deployed to another resource group: its id there
                ids.append(
                    _extension_resource_id(scope, where.resource_group_id(), r["type"], value)
                )
                continue
        ids.append(_resource_id(scope, r["type"], *parts))
    order: list[int] = []
    state: dict[int, str] = {}

    def visit(i: int) -> None:
        if state.get(i) == "done":
            return
        if state.get(i) == "visiting":
            raise ArmError(f"circular dependsOn at {ids[i]}")
        state[i] = "visiting"
        resource, index = resources[i]
        for dep in resource.get("dependsOn", []):
            _at(scope, index)
            target = scope.value(dep)
            matches = [j for j, rid in enumerate(ids) if rid.lower() == _str(target).lower()] or [
                j for j, (r, _) in enumerate(resources) if r.get("copy", {}).get("name") == target
            ]
            if not matches:
                raise ArmError(f"{ids[i]} depends on {target}, which the template does not declare")
            for j in matches:
                visit(j)
        state[i] = "done"
        order.append(i)

    for i in range(len(resources)):
        visit(i)
    return [resources[i] for i in order]
