"""Validation of tool arguments against the tools' strict JSON schemas.

The schemas are the small subset the Responses API accepts with `strict: true` (objects
with every property required and no extra keys, scalar types, nullable types as
`["x", "null"]`, enums, arrays). A validator for exactly that subset is a few dozen lines
and writes messages aimed at the model ("'timeout_s' must be an integer or null, got a
string"), which a general validator such as `jsonschema` does not; it also avoids a
dependency for a closed set of schemas we write ourselves.
"""

from __future__ import annotations

from typing import Any

_JSON_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "object": "an object",
    "array": "an array",
    "null": "null",
}


class ArgumentError(ValueError):
    """The arguments do not match the schema; the message says where and what was expected."""


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _matches(value: Any, json_type: str) -> bool:
    actual = _type_of(value)
    if json_type == "number":
        return actual in ("integer", "number")
    if json_type == "integer":
        # JSON has one number type: 5.0 is an integer as far as the schema is concerned.
        return actual == "integer" or (actual == "number" and float(value).is_integer())
    return actual == json_type


def _expected(types: list[str]) -> str:
    return " or ".join(_JSON_TYPE_NAMES.get(t, t) for t in types)


def _name_of_type(value: Any) -> str:
    actual = _type_of(value)
    return _JSON_TYPE_NAMES.get(actual, actual)


def _where(path: str) -> str:
    return f"'{path}'" if path else "the arguments"


def _validate(value: Any, schema: dict[str, Any], path: str) -> Any:
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else list(declared or [])
    if types and not any(_matches(value, t) for t in types):
        raise ArgumentError(
            f"{_where(path)} must be {_expected(types)}, got {_name_of_type(value)}"
        )
    if isinstance(value, float) and "integer" in types and "number" not in types:
        value = int(value)
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(repr(c) for c in schema["enum"])
        raise ArgumentError(f"{_where(path)} must be one of {choices}, got {value!r}")
    if isinstance(value, dict) and "properties" in schema:
        return _validate_object(value, schema, path)
    if isinstance(value, list) and "items" in schema:
        return [_validate(v, schema["items"], f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _validate_object(value: dict[str, Any], schema: dict[str, Any], path: str) -> dict[str, Any]:
    properties: dict[str, Any] = schema["properties"]
    prefix = f"{path}." if path else ""
    if schema.get("additionalProperties") is False:
        extra = sorted(k for k in value if k not in properties)
        if extra:
            names = ", ".join(f"'{prefix}{k}'" for k in extra)
            allowed = ", ".join(f"'{k}'" for k in properties)
            raise ArgumentError(f"unexpected argument {names}; the allowed arguments are {allowed}")
    missing = [k for k in schema.get("required", ()) if k not in value]
    if missing:
        details = ", ".join(f"'{prefix}{k}' ({describe(properties[k])})" for k in missing)
        raise ArgumentError(f"missing required argument {details}")
    return {
        key: _validate(item, properties[key], f"{prefix}{key}") if key in properties else item
        for key, item in value.items()
    }


def describe(schema: dict[str, Any]) -> str:
    """A short human description of what a property accepts, e.g. `an integer or null`."""
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else list(declared or [])
    text = _expected(types) if types else "any value"
    if "enum" in schema:
        text += " (one of " + ", ".join(repr(c) for c in schema["enum"]) + ")"
    return text


def validate_arguments(schema: dict[str, Any], arguments: Any) -> dict[str, Any]:
    """Check `arguments` against a tool's parameter schema and return them (integers given
    as `5.0` become `5`). Raises ArgumentError naming the argument and what was expected."""
    if not isinstance(arguments, dict):
        raise ArgumentError(f"the arguments must be a JSON object, got {_name_of_type(arguments)}")
    return _validate(arguments, schema, "")


def strict_schema_problems(schema: dict[str, Any], path: str = "parameters") -> list[str]:
    """Where `schema` breaks the rules the Responses API enforces for `strict: true`:
    every object lists all its properties in `required` and sets additionalProperties false."""
    problems: list[str] = []
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else list(declared or [])
    if not types:
        problems.append(f"{path}: no type")
    if "object" in types:
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            problems.append(f"{path}: object without properties")
            properties = {}
        if schema.get("additionalProperties") is not False:
            problems.append(f"{path}: additionalProperties is not false")
        required = schema.get("required", [])
        if sorted(required) != sorted(properties):
            problems.append(
                f"{path}: required {sorted(required)} != properties {sorted(properties)}"
            )
        for key, sub in properties.items():
            problems.extend(strict_schema_problems(sub, f"{path}.{key}"))
    if "array" in types:
        if "items" not in schema:
            problems.append(f"{path}: array without items")
        else:
            problems.extend(strict_schema_problems(schema["items"], f"{path}[]"))
    return problems
