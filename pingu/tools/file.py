"""The `file` tool: read, write, append and list files inside the agent's workspace."""

from __future__ import annotations

import asyncio
import os
import stat
from typing import Any

from pingu.tools.base import ToolContext, ToolError
from pingu.tools.workspace import confine, open_confined

READ_CAP_BYTES = 256 * 1024
WRITE_CAP_BYTES = 1024 * 1024
LIST_CAP_ENTRIES = 500


class FileTool:
    name = "file"
    description = (
        "Read, write, append to or list files in your workspace directory. `path` is relative "
        "to the workspace (use '.' for the workspace itself); paths outside it, `..` escapes "
        "and symlinks leading out are refused. read: returns the text of a file (at most "
        f"{READ_CAP_BYTES // 1024} KB, longer files are cut with a note). write: replaces the "
        "file with `content` (creates parent directories). append: adds `content` to the end. "
        f"`content` is at most {WRITE_CAP_BYTES // (1024 * 1024)} MB and must be null for "
        f"read and list. list: the entries of a directory (name, type, size; at most "
        f"{LIST_CAP_ENTRIES})."
    )
    parameters: dict[str, Any] = {  # noqa: RUF012 - the Tool protocol wants a plain attribute
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "enum": ["read", "write", "append", "list"],
                "description": "What to do.",
            },
            "path": {
                "type": "string",
                "description": "File or directory path relative to the workspace.",
            },
            "content": {
                "type": ["string", "null"],
                "description": "The text to write or append; null for read and list.",
            },
        },
        "required": ["action", "path", "content"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        *,
        read_cap_bytes: int = READ_CAP_BYTES,
        write_cap_bytes: int = WRITE_CAP_BYTES,
        list_cap_entries: int = LIST_CAP_ENTRIES,
    ) -> None:
        self.read_cap_bytes = read_cap_bytes
        self.write_cap_bytes = write_cap_bytes
        self.list_cap_entries = list_cap_entries

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        action: str = args["action"]
        path: str = args["path"].strip() or "."
        content: str | None = args.get("content")
        data = b""
        if action in ("write", "append"):
            if content is None:
                raise ToolError(f"'content' is required for {action} (it was null)")
            data = content.encode("utf-8")
            if len(data) > self.write_cap_bytes:
                raise ToolError(
                    f"content is {len(data)} bytes; the limit is {self.write_cap_bytes} bytes "
                    "(write it in parts with append)"
                )
        try:
            if action in ("write", "append"):
                return await asyncio.to_thread(self._write, ctx, path, data, action == "append")
            if action == "read":
                return await asyncio.to_thread(self._read, ctx, path)
            return await asyncio.to_thread(self._list, ctx, path)
        except OSError as exc:
            raise ToolError(f"{action} {path} failed: {exc.strerror or exc}") from None

    def _read(self, ctx: ToolContext, path: str) -> str:
        root, parts = confine(ctx.workspace, path)
        try:
            fd = open_confined(root, parts, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise ToolError(f"no such file: {path}") from None
        except PermissionError:
            raise ToolError(f"permission denied: {path}") from None
        # fstat before wrapping: FileIO refuses directories with a less helpful error.
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            if stat.S_ISDIR(info.st_mode):
                raise ToolError(f"{path} is a directory; use the list action")
            raise ToolError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb") as f:
            data = f.read(self.read_cap_bytes)
        if b"\0" in data[:8192]:
            raise ToolError(f"{path} is a binary file ({info.st_size} bytes); not shown")
        text = data.decode("utf-8", errors="replace")
        if info.st_size > len(data):
            text += (
                f"\n[... truncated: showed the first {len(data)} of {info.st_size} bytes; "
                "use the shell tool (e.g. sed -n, tail) to read further ...]"
            )
        return text if text else f"({path} is empty)"

    def _write(self, ctx: ToolContext, path: str, data: bytes, append: bool) -> str:
        root, parts = confine(ctx.workspace, path)
        if not parts:
            raise ToolError("cannot write to the workspace directory itself; name a file")
        # O_NONBLOCK: a FIFO without a reader fails instead of hanging the thread.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | (os.O_APPEND if append else os.O_TRUNC)
        try:
            fd = open_confined(root, parts, flags)
        except IsADirectoryError:
            raise ToolError(f"{path} is a directory") from None
        except NotADirectoryError:
            raise ToolError(f"a parent of {path} is a file, not a directory") from None
        except PermissionError:
            raise ToolError(f"permission denied: {path}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ToolError(f"{path} is not a regular file")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        verb = "appended" if append else "wrote"
        return f"{verb} {len(data)} bytes to {path}"

    def _list(self, ctx: ToolContext, path: str) -> str:
        root, parts = confine(ctx.workspace, path)
        try:
            fd = open_confined(root, parts, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            raise ToolError(f"no such directory: {path}") from None
        except NotADirectoryError:
            raise ToolError(f"{path} is a file, not a directory; use the read action") from None
        except PermissionError:
            raise ToolError(f"permission denied: {path}") from None
        try:
            with os.scandir(fd) as entries:
                rows = sorted((_describe_entry(entry, fd) for entry in entries), key=lambda r: r[0])
        finally:
            os.close(fd)
        if not rows:
            return f"{path}: empty directory"
        lines = [f"{path}: {len(rows)} entries"]
        lines.extend(line for _, line in rows[: self.list_cap_entries])
        if len(rows) > self.list_cap_entries:
            lines.append(f"[... {len(rows) - self.list_cap_entries} more entries not shown ...]")
        return "\n".join(lines)


def _describe_entry(entry: os.DirEntry[str], dir_fd: int) -> tuple[str, str]:
    name = entry.name
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return name, f"{name}  (unreadable)"
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            target = "?"
        return name, f"{name}  symlink -> {target}"
    if stat.S_ISDIR(info.st_mode):
        return name, f"{name}/  dir"
    if stat.S_ISREG(info.st_mode):
        return name, f"{name}  file, {info.st_size} bytes"
    return name, f"{name}  other"
