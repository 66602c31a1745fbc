"""The OpenAPI 3.1 description of the gateway, served at `/openapi.json`.

Hand-written as data: the API is small, and a document kept next to the handlers is
easier to review than one generated from decorators. `tests/test_gateway_api.py` checks
that every route of the application is listed here.
"""

from __future__ import annotations

import copy
from typing import Any

from pingu import __version__


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _array_of(schema: str) -> dict[str, Any]:
    return {"type": "array", "items": {"$ref": f"#/components/schemas/{schema}"}}


def _json(description: str, schema_ref: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema_ref}"}}},
    }


_SESSION_ID_PARAM = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": 200},
}

_UNAUTHORIZED = _error("Missing or wrong bearer token (only when a token is configured).")

_SSE_DESCRIPTION = """\
A stream of Server-Sent Events, one per agent event; `data` is one line of JSON.

- `token` `{"text"}`: a piece of the answer as it streams.
- `tool_call` `{"call_id", "name", "arguments"}`: the agent calls a tool (`arguments` is
  the JSON string the model sent).
- `tool_result` `{"call_id", "name", "output", "is_error"}`: what the tool returned.
- `message` `{"text"}`: a message the agent sends with its `message` tool.
- `error` `{"message"}`: a short description of a failure (the turn then ends).
- `done` `{"text", "status", "turn_id", "usage"}`: always last; `text` is the complete
  final answer, `status` one of completed, failed, cancelled, limited.

Lines starting with `:` are keep-alive comments.
"""

_DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "Pingu gateway",
        "version": __version__,
        "description": (
            "The HTTP API of a Pingu daemon. Routes under `/v1` need "
            "`Authorization: Bearer <token>` when `[gateway] token` is configured; without "
            "a token the gateway only listens on 127.0.0.1. Errors are JSON objects "
            '`{"error": {"code", "message"}}`.'
        ),
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {
                            "code": {"type": "string", "examples": ["invalid_json"]},
                            "message": {"type": "string"},
                        },
                    }
                },
            },
            "ChatRequest": {
                "type": "object",
                "required": ["session_id", "message"],
                "additionalProperties": False,
                "properties": {
                    "session_id": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 200,
                        "description": "Any string; a new id starts a new session.",
                    },
                    "message": {"type": "string", "minLength": 1},
                    "agent": {
                        "type": ["string", "null"],
                        "description": "An agent profile; default: the top-level agent.",
                    },
                },
            },
            "Health": {
                "type": "object",
                "required": ["status"],
                "properties": {
                    "status": {"enum": ["ok", "starting", "stopping"]},
                    "database": {"type": "object"},
                    "channels": {
                        "type": "object",
                        "additionalProperties": {"type": "object"},
                    },
                },
            },
            "Session": {
                "type": "object",
                "required": ["id"],
                "properties": {
                    "id": {"type": "string"},
                    "channel": {"type": ["string", "null"]},
                    "channel_id": {"type": ["string", "null"]},
                    "title": {"type": ["string", "null"]},
                    "model": {"type": ["string", "null"]},
                    "created_at": {"type": "string"},
                    "updated_at": {"type": "string"},
                    "turn_count": {"type": "integer"},
                    "running": {"type": "boolean", "description": "A turn is running now."},
                },
                "additionalProperties": True,
            },
            "SessionList": {
                "type": "object",
                "required": ["sessions", "limit", "offset", "has_more"],
                "properties": {
                    "sessions": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/Session"},
                    },
                    "has_more": {"type": "boolean"},
                    "limit": {"type": "integer"},
                    "offset": {"type": "integer"},
                },
            },
            "Turn": {
                "type": "object",
                "properties": {
                    "id": {"type": "integer"},
                    "user_message": {"type": "string"},
                    "final_text": {"type": "string"},
                    "status": {"enum": ["completed", "failed", "cancelled", "limited"]},
                    "error": {"type": ["string", "null"]},
                    "agent": {"type": ["string", "null"]},
                    "model": {"type": ["string", "null"]},
                    "created_at": {"type": "string"},
                },
            },
            "SessionDetail": {
                "allOf": [
                    {"$ref": "#/components/schemas/Session"},
                    {
                        "type": "object",
                        "required": ["turns"],
                        "properties": {
                            "turns": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/Turn"},
                            }
                        },
                    },
                ]
            },
        },
    },
    "paths": {
        "/healthz": {
            "get": {
                "summary": "Liveness and readiness",
                "security": [],
                "responses": {
                    "200": _json("Ready: database and channel status.", "Health"),
                    "503": _json("Starting or stopping.", "Health"),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "security": [],
                "responses": {"200": {"description": "The OpenAPI document."}},
            }
        },
        "/v1/chat": {
            "post": {
                "summary": "Send a message and stream the agent's turn",
                "description": (
                    "The turn is queued behind any running turn of the same session (from "
                    "any channel). If the client disconnects mid-stream the turn is NOT "
                    "cancelled: it runs to the end and is saved; use "
                    "`DELETE /v1/sessions/{session_id}/run` to cancel it."
                ),
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/ChatRequest"}}
                    },
                },
                "responses": {
                    "200": {
                        "description": _SSE_DESCRIPTION,
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    "400": _error("Bad JSON, missing or wrong-typed fields, unknown fields."),
                    "401": _UNAUTHORIZED,
                    "404": _error("Unknown agent."),
                    "413": _error("Body larger than `[gateway] max_body_bytes`."),
                    "503": _error("The daemon is starting or shutting down."),
                },
            }
        },
        "/v1/sessions": {
            "get": {
                "summary": "List sessions, most recent first",
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                    },
                    {
                        "name": "offset",
                        "in": "query",
                        "schema": {
                            "type": "integer",
                            "minimum": 0,
                            "maximum": 1_000_000_000,
                            "default": 0,
                        },
                    },
                ],
                "responses": {
                    "200": _json("A page of sessions.", "SessionList"),
                    "400": _error("Bad limit or offset."),
                    "401": _UNAUTHORIZED,
                },
            }
        },
        "/v1/sessions/{session_id}": {
            "get": {
                "summary": "A session and its turns",
                "parameters": [_SESSION_ID_PARAM],
                "responses": {
                    "200": _json("The session with its turns, oldest first.", "SessionDetail"),
                    "401": _UNAUTHORIZED,
                    "404": _error("Unknown session."),
                },
            }
        },
        "/v1/sessions/{session_id}/run": {
            "delete": {
                "summary": "Cancel the session's running turn",
                "description": (
                    "The turn is saved with status `cancelled`. With `?queued=true` the turns "
                    "waiting behind it are dropped too."
                ),
                "parameters": [
                    _SESSION_ID_PARAM,
                    {"name": "queued", "in": "query", "schema": {"type": "boolean"}},
                ],
                "responses": {
                    "200": {
                        "description": "Whether a running turn was cancelled.",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["cancelled"],
                                    "properties": {"cancelled": {"type": "boolean"}},
                                }
                            }
                        },
                    },
                    "401": _UNAUTHORIZED,
                    "404": _error("Unknown session."),
                },
            }
        },
    },
    "security": [{"bearer": []}],
}


def openapi_document() -> dict[str, Any]:
    """A fresh copy of the document (callers may not mutate the module's)."""
    return copy.deepcopy(_DOCUMENT)
