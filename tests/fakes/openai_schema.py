"""Check Responses API request pieces against the openai package's own TypedDicts.

The real API rejects input items with undeclared keys, wrong literals and wrong types, and
names the offending path in its error (`Unknown parameter: 'input[1].status'.`). Rather than
hand-copy that schema, this module walks `openai.types.responses.ResponseInputItemParam`
(Required/NotRequired keys, `type`/`role` Literal discriminators, nested TypedDicts,
Iterable/list, unions) so it stays in step with the installed SDK.

Public API:

- `check_input_item(item, path, *, allow_nulls=False) -> list[str]`: the error messages (in the
  real API's wording) for one input item; an empty list means the item is valid.
  `path` is the item's location, e.g. `"input[3]"`.
- `input_item_errors(item, path, *, allow_nulls=False) -> list[SchemaError]`: the same with the
  `param` and `code` the real API puts in its error body.
- `REQUEST_PARAMS`: the top-level keys `POST /v1/responses` accepts.

About nulls: the real API tolerates `null` for some keys the SDK does not mark Optional (the
corpus has a `function_call` with `"status": null` that was accepted). With
`allow_nulls=False` (the default) a null is reported as an unknown parameter unless the SDK
declares the key Optional: stricter than the service, because Pingu must never send nulls
(output items are dumped with exclude_none) and a null that slips through is a bug.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin

import typing_extensions
from openai.types.responses import response_create_params
from openai.types.responses.response_input_item_param import ResponseInputItemParam


@dataclass(frozen=True)
class SchemaError:
    message: str
    param: str
    code: str | None


_MISSING = object()
_WRAPPERS = {typing_extensions.Required, typing_extensions.NotRequired, typing.Required}
_WRAPPERS |= {typing.NotRequired, typing_extensions.ReadOnly}
_WRAPPERS |= {typing.Annotated, typing_extensions.Annotated}


def _unwrap(tp: Any) -> Any:
    """Strip Required/NotRequired/ReadOnly/Annotated."""
    while True:
        origin = get_origin(tp)
        if origin in _WRAPPERS:
            tp = get_args(tp)[0]
        else:
            return tp


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and hasattr(tp, "__required_keys__") and issubclass(tp, dict)


@cache
def _fields(td: type) -> tuple[dict[str, Any], frozenset[str]]:
    hints = typing_extensions.get_type_hints(td, include_extras=True)
    # __required_keys__ misses Required[...] written as a string annotation, so read the markers
    required = set()
    for key, hint in hints.items():
        origin = get_origin(hint)
        optional = origin in (typing.NotRequired, typing_extensions.NotRequired)
        explicit = origin in (typing.Required, typing_extensions.Required)
        if explicit or (not optional and key in td.__required_keys__):
            required.add(key)
    return {k: _unwrap(v) for k, v in hints.items()}, frozenset(required)


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _members(tp: Any) -> list[Any]:
    """Flatten unions and type aliases into their members."""
    tp = _unwrap(tp)
    if _is_union(tp):
        out: list[Any] = []
        for arg in get_args(tp):
            out.extend(_members(arg))
        return out
    return [tp]


def _is_optional(tp: Any) -> bool:
    return any(m is type(None) for m in _members(tp))


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _expected(tp: Any) -> str:
    names: list[str] = []
    for m in _members(tp):
        if m is type(None):
            continue
        origin = get_origin(m)
        if m is str or origin is Literal:
            names.append("a string")
        elif m is bool:
            names.append("a boolean")
        elif m is int:
            names.append("an integer")
        elif m is float:
            names.append("a number")
        elif _is_typeddict(m) or origin in (dict, Mapping) or m is dict:
            names.append("an object")
        elif origin in (list, Iterable, Sequence) or m is list or _is_sequence_alias(m):
            names.append("an array")
        else:
            names.append("a value")
    names = list(dict.fromkeys(names))
    if len(names) == 1:
        return names[0]
    return "one of " + " or ".join(names)


def _is_sequence_alias(tp: Any) -> bool:
    # openai's SequenceNotStr[X] is a Protocol generic
    return getattr(get_origin(tp) or tp, "__name__", "") == "SequenceNotStr"


def _literal_values(tp: Any) -> tuple[Any, ...] | None:
    values: list[Any] = []
    for m in _members(tp):
        if m is type(None):
            continue
        if get_origin(m) is not Literal:
            return None
        values.extend(get_args(m))
    return tuple(values) or None


def _quote_list(values: Iterable[Any]) -> str:
    quoted = [f"'{v}'" for v in values]
    if len(quoted) <= 1:
        return "".join(quoted)
    return ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def _check_value(value: Any, tp: Any, path: str, allow_nulls: bool) -> list[SchemaError]:
    tp = _unwrap(tp)
    if tp is Any or tp is object:
        return []
    if value is None:
        if _is_optional(tp) or allow_nulls:
            return []
        return [
            SchemaError(
                f"Invalid type for '{path}': expected {_expected(tp)}, but got null instead.",
                path,
                "invalid_type",
            )
        ]
    members = [m for m in _members(tp) if m is not type(None)]
    literal_values = _literal_values(tp)
    if literal_values is not None:
        if value in literal_values and type(value) is type(literal_values[0]):
            return []
        if not isinstance(value, str):
            return [_type_error(path, tp, value)]
        return [
            SchemaError(
                f"Invalid value: '{value}'. Supported values are: {_quote_list(literal_values)}.",
                path,
                "invalid_value",
            )
        ]
    if len(members) > 1:
        return _check_union(value, members, path, allow_nulls)
    m = members[0]
    origin = get_origin(m)
    if m is str:
        return [] if isinstance(value, str) else [_type_error(path, m, value)]
    if m is bool:
        return [] if isinstance(value, bool) else [_type_error(path, m, value)]
    if m is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [_type_error(path, m, value)]
    if m is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [_type_error(path, m, value)]
    if _is_typeddict(m):
        if not isinstance(value, dict):
            return [_type_error(path, m, value)]
        return _check_typeddict(value, m, path, allow_nulls)
    if origin in (list, Iterable, Sequence) or m is list or _is_sequence_alias(m):
        if not isinstance(value, list):
            return [_type_error(path, m, value)]
        args = get_args(m)
        elem = args[0] if args else Any
        errors: list[SchemaError] = []
        for i, v in enumerate(value):
            errors.extend(_check_value(v, elem, f"{path}[{i}]", allow_nulls))
        return errors
    if origin in (dict, Mapping) or m is dict:
        if not isinstance(value, dict):
            return [_type_error(path, m, value)]
        args = get_args(m)
        if len(args) == 2:
            errors = []
            for k, v in value.items():
                errors.extend(_check_value(v, args[1], f"{path}.{k}", allow_nulls))
            return errors
        return []
    return []  # a type this checker does not model: accept


def _type_error(path: str, tp: Any, value: Any) -> SchemaError:
    return SchemaError(
        f"Invalid type for '{path}': expected {_expected(tp)}, but got {_describe(value)} instead.",
        path,
        "invalid_type",
    )


def _same_kind(value: Any, tp: Any) -> bool:
    """Whether `value` has the JSON kind (string, array, ...) that `tp` describes."""
    origin = get_origin(tp)
    if tp is Any or tp is object:
        return True
    if tp is str or origin is Literal:
        return isinstance(value, str)
    if tp is bool:
        return isinstance(value, bool)
    if tp in (int, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if _is_typeddict(tp) or origin in (dict, Mapping) or tp is dict:
        return isinstance(value, dict)
    if origin in (list, Iterable, Sequence) or tp is list or _is_sequence_alias(tp):
        return isinstance(value, list)
    return True


def _discriminated(value: dict, members: list[Any]) -> list[Any]:
    """Members whose Literal `type` (then `role`) matches the value's."""
    candidates = [m for m in members if _is_typeddict(m)]
    for key in ("type", "role"):
        if key not in value:
            continue
        narrowed = []
        for m in candidates:
            fields, _ = _fields(m)
            if key not in fields:
                continue
            allowed = _literal_values(fields[key])
            if allowed is None or value[key] in allowed:
                narrowed.append(m)
        if narrowed:
            candidates = narrowed
    return candidates


def _unknown_discriminator(value: dict, members: list[Any], path: str) -> SchemaError | None:
    """A `type` no member declares (only for unions discriminated by `type`)."""
    if "type" not in value:
        return None
    known: list[Any] = []
    for m in members:
        if not _is_typeddict(m):
            continue
        allowed = _literal_values(_fields(m)[0].get("type", Any))
        if allowed is None:
            return None  # some member takes any type: not a discriminated union
        known.extend(allowed)
    if not known or value["type"] in known:
        return None
    sub = f"{path}.type"
    return SchemaError(
        f"Invalid value: '{value['type']}'. Supported values are: "
        f"{_quote_list(dict.fromkeys(known))}.",
        sub,
        "invalid_value",
    )


def _check_union(value: Any, members: list[Any], path: str, allow_nulls: bool) -> list[SchemaError]:
    if isinstance(value, dict):
        type_error = _unknown_discriminator(value, members, path)
        if type_error:
            return [type_error]
        candidates = _discriminated(value, members)
        if not candidates:
            return [_type_error(path, Union[tuple(members)], value)]  # noqa: UP007
    else:
        candidates = [m for m in members if _same_kind(value, m)]
        if not candidates:
            return [_type_error(path, Union[tuple(members)], value)]  # noqa: UP007
    best: list[SchemaError] | None = None
    for m in candidates:
        errors = _check_value(value, m, path, allow_nulls)
        if not errors:
            return []
        if best is None or len(errors) < len(best):
            best = errors
    return best or []


def _check_typeddict(value: dict, td: type, path: str, allow_nulls: bool) -> list[SchemaError]:
    fields, required = _fields(td)
    errors: list[SchemaError] = []
    for key, v in value.items():
        sub = f"{path}.{key}" if path else key
        if key not in fields:
            errors.append(SchemaError(f"Unknown parameter: '{sub}'.", sub, "unknown_parameter"))
        elif v is None and not allow_nulls and not _is_optional(fields[key]):
            # a null on an optional key: reported the way the real API reports stray keys
            if key in required:
                errors.extend(_check_value(v, fields[key], sub, allow_nulls))
            else:
                errors.append(SchemaError(f"Unknown parameter: '{sub}'.", sub, "unknown_parameter"))
        else:
            errors.extend(_check_value(v, fields[key], sub, allow_nulls))
    for key in sorted(required - value.keys()):
        sub = f"{path}.{key}" if path else key
        errors.append(
            SchemaError(f"Missing required parameter: '{sub}'.", sub, "missing_required_parameter")
        )
    return errors


def input_item_errors(item: Any, path: str, *, allow_nulls: bool = False) -> list[SchemaError]:
    """Every schema error of one Responses API input item, with the real API's wording."""
    if not isinstance(item, dict):
        return [
            SchemaError(
                f"Invalid type for '{path}': expected an input item, "
                f"but got {_describe(item)} instead.",
                path,
                "invalid_type",
            )
        ]
    return _check_value(item, ResponseInputItemParam, path, allow_nulls)


def check_input_item(item: dict, path: str, *, allow_nulls: bool = False) -> list[str]:
    """The error messages for one input item (empty when the real API would accept it)."""
    return [e.message for e in input_item_errors(item, path, allow_nulls=allow_nulls)]


def _request_params() -> frozenset[str]:
    names: set[str] = set()
    for td in (
        response_create_params.ResponseCreateParamsNonStreaming,
        response_create_params.ResponseCreateParamsStreaming,
    ):
        names.update(typing_extensions.get_type_hints(td).keys())
    return frozenset(names)


REQUEST_PARAMS: frozenset[str] = _request_params()
