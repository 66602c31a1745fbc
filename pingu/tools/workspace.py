"""Agent workspaces and confinement of paths to them.

Each agent works in its own directory under `Config.workspaces` (by default
`<state dir>/workspaces/<agent name>`). The `file` tool may touch nothing outside it:
a path is checked lexically (absolute paths elsewhere, `..` escapes) and by its real
path (symlinks, including symlinked parent directories, must not lead out). The file is
then opened component by component from the workspace directory with O_NOFOLLOW, so a
directory swapped for a symlink between the check and the open is refused, not followed.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from pathlib import Path

from pingu.tools.base import ToolError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def agent_workspace_path(root: Path, agent_name: str) -> Path:
    """The workspace directory of `agent_name` below `root` (not created)."""
    if not agent_name or agent_name in (".", "..") or "/" in agent_name or "\0" in agent_name:
        raise ValueError(f"agent name {agent_name!r} cannot be used as a directory name")
    return root.expanduser() / agent_name


async def ensure_agent_workspace(root: Path, agent_name: str) -> Path:
    """Create (if needed) and return the agent's workspace directory, private to the user."""
    path = agent_workspace_path(root, agent_name)
    await asyncio.to_thread(path.mkdir, mode=0o700, parents=True, exist_ok=True)
    return path


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def confine(workspace: Path, raw_path: str) -> tuple[str, tuple[str, ...]]:
    """Check `raw_path` (relative to the workspace, or absolute inside it) and return the
    workspace's real path and the components of the target's real path below it.

    Raises ToolError when the path leaves the workspace, lexically or through a symlink."""
    if "\0" in raw_path:
        raise ToolError("path contains a NUL byte")
    root = os.path.realpath(workspace)
    candidate = os.path.join(root, raw_path)  # an absolute raw_path replaces root
    lexical = os.path.normpath(candidate)
    if not _is_within(lexical, root):
        raise ToolError(
            f"path escapes the workspace: {raw_path} (use a path relative to the workspace)"
        )
    real = os.path.realpath(candidate)
    if not _is_within(real, root):
        raise ToolError(f"path leads outside the workspace through a symlink: {raw_path}")
    relative = os.path.relpath(real, root)
    parts = () if relative == "." else tuple(relative.split(os.sep))
    return root, parts


def open_parent(root: str, parts: tuple[str, ...], *, create: bool) -> int:
    """Open the directory holding `parts[-1]` (or the root itself for no parts) without
    following any symlink; with `create`, make missing directories. Returns a dir fd."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            try:
                next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, 0o755, dir_fd=fd)
                next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(name, fd):
                    raise ToolError(
                        "a directory on the path is a symlink (it may have just been "
                        "changed); refused"
                    ) from None
                raise
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_confined(root: str, parts: tuple[str, ...], flags: int, mode: int = 0o644) -> int:
    """Open the target below `root` with `flags`, never following a symlink."""
    if not parts:
        return os.open(root, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    create = bool(flags & os.O_CREAT)
    dir_fd = open_parent(root, parts, create=create)
    try:
        return os.open(
            parts[-1], flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode, dir_fd=dir_fd
        )
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ToolError(
                "the file is a symlink (it may have just been changed); refused"
            ) from None
        raise
    finally:
        os.close(dir_fd)
