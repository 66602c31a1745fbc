"""The file tool on real files: confinement to the workspace, caps, the four actions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pingu.tools.base import ToolContext
from pingu.tools.file import FileTool
from pingu.tools.registry import ToolOutcome, build_tools, run_tool
from pingu.tools.workspace import agent_workspace_path, ensure_agent_workspace


async def _noop_emit(event: object) -> None:
    return None


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace and, next to it, a directory with a secret the agent must not reach."""
    workspace = tmp_path / "workspaces" / "main"
    workspace.mkdir(parents=True)
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.txt").write_text("the launch codes")
    return workspace, outside


def ctx_for(workspace: Path) -> ToolContext:
    return ToolContext("s1", "main", workspace, _noop_emit, None, 30.0)


async def file_call(
    workspace: Path, action: str, path: str, content: str | None = None
) -> ToolOutcome:
    args = json.dumps({"action": action, "path": path, "content": content})
    return await run_tool(build_tools(["file"]), "file", args, ctx_for(workspace))


async def test_write_read_append_list(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    out = await file_call(workspace, "write", "notes/todo.txt", "buy milk\n")
    assert out == ToolOutcome("wrote 9 bytes to notes/todo.txt", False)
    assert (workspace / "notes" / "todo.txt").read_text() == "buy milk\n"

    out = await file_call(workspace, "append", "notes/todo.txt", "walk dog\n")
    assert out == ToolOutcome("appended 9 bytes to notes/todo.txt", False)

    out = await file_call(workspace, "read", "notes/todo.txt")
    assert out == ToolOutcome("buy milk\nwalk dog\n", False)

    (workspace / "b.txt").write_text("12345")
    out = await file_call(workspace, "list", ".")
    assert out == ToolOutcome(".: 2 entries\nb.txt  file, 5 bytes\nnotes/  dir", False)

    out = await file_call(workspace, "write", "notes/todo.txt", "replaced")
    assert (workspace / "notes" / "todo.txt").read_text() == "replaced"


async def test_absolute_path_inside_workspace_is_allowed(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    (workspace / "a.txt").write_text("inside")
    out = await file_call(workspace, "read", str(workspace / "a.txt"))
    assert out == ToolOutcome("inside", False)


@pytest.mark.parametrize("path", ["../private/secret.txt", "a/../../private/secret.txt", ".."])
async def test_traversal_is_refused(layout: tuple[Path, Path], path: str) -> None:
    workspace, _ = layout
    (workspace / "a").mkdir()
    out = await file_call(workspace, "read", path)
    assert out.is_error
    assert out.output.startswith(f"error: path escapes the workspace: {path}")
    assert "launch codes" not in out.output


async def test_write_traversal_creates_nothing_outside(layout: tuple[Path, Path]) -> None:
    workspace, outside = layout
    out = await file_call(workspace, "write", "../private/new.txt", "x")
    assert out.is_error and "path escapes the workspace" in out.output
    out = await file_call(workspace, "write", "x/../../../evil/new.txt", "x")
    assert out.is_error and "path escapes the workspace" in out.output
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not (workspace.parent.parent / "evil").exists()


async def test_absolute_path_outside_is_refused(layout: tuple[Path, Path]) -> None:
    workspace, outside = layout
    out = await file_call(workspace, "read", str(outside / "secret.txt"))
    assert out.is_error and "path escapes the workspace" in out.output
    out = await file_call(workspace, "list", "/")
    assert out.is_error and "path escapes the workspace" in out.output


async def test_symlinked_file_leading_out_is_refused(layout: tuple[Path, Path]) -> None:
    workspace, outside = layout
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    out = await file_call(workspace, "read", "link.txt")
    assert out == ToolOutcome(
        "error: path leads outside the workspace through a symlink: link.txt", True
    )
    out = await file_call(workspace, "write", "link.txt", "overwritten")
    assert out.is_error and "symlink" in out.output
    out = await file_call(workspace, "append", "link.txt", "more")
    assert out.is_error and "symlink" in out.output
    assert (outside / "secret.txt").read_text() == "the launch codes"


async def test_dangling_symlink_leading_out_is_refused_on_write(
    layout: tuple[Path, Path],
) -> None:
    workspace, outside = layout
    (workspace / "new.txt").symlink_to(outside / "created-by-agent.txt")
    out = await file_call(workspace, "write", "new.txt", "x")
    assert out.is_error and "symlink" in out.output
    assert not (outside / "created-by-agent.txt").exists()


async def test_symlinked_directory_leading_out_is_refused(layout: tuple[Path, Path]) -> None:
    workspace, outside = layout
    (workspace / "docs").symlink_to(outside, target_is_directory=True)
    for action, content in (("read", None), ("write", "x"), ("append", "x")):
        out = await file_call(workspace, action, "docs/secret.txt", content)
        assert out.is_error, action
        assert "leads outside the workspace through a symlink: docs/secret.txt" in out.output
    out = await file_call(workspace, "list", "docs")
    assert out.is_error and "symlink" in out.output
    out = await file_call(workspace, "write", "docs/sub/new.txt", "x")
    assert out.is_error and "symlink" in out.output
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "the launch codes"


async def test_symlink_inside_workspace_is_allowed(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    (workspace / "real").mkdir()
    (workspace / "real" / "data.txt").write_text("v1")
    (workspace / "alias").symlink_to(workspace / "real", target_is_directory=True)
    (workspace / "data-link.txt").symlink_to("real/data.txt")

    assert await file_call(workspace, "read", "alias/data.txt") == ToolOutcome("v1", False)
    assert await file_call(workspace, "read", "data-link.txt") == ToolOutcome("v1", False)
    out = await file_call(workspace, "write", "data-link.txt", "v2")
    assert not out.is_error
    assert (workspace / "real" / "data.txt").read_text() == "v2"
    assert (workspace / "data-link.txt").is_symlink()
    out = await file_call(workspace, "list", ".")
    assert "data-link.txt  symlink -> real/data.txt" in out.output
    assert "alias  symlink -> " in out.output


async def test_workspace_behind_a_symlink_still_works(tmp_path: Path) -> None:
    real = tmp_path / "real-state"
    (real / "ws").mkdir(parents=True)
    (tmp_path / "state").symlink_to(real, target_is_directory=True)
    workspace = tmp_path / "state" / "ws"
    out = await file_call(workspace, "write", "a.txt", "hello")
    assert out == ToolOutcome("wrote 5 bytes to a.txt", False)
    assert await file_call(workspace, "read", "a.txt") == ToolOutcome("hello", False)


async def test_read_cap_truncates_with_note(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    (workspace / "big.txt").write_text("x" * 1000)
    tool = FileTool(read_cap_bytes=100)
    out = await run_tool(
        {"file": tool},
        "file",
        json.dumps({"action": "read", "path": "big.txt", "content": None}),
        ctx_for(workspace),
    )
    assert not out.is_error
    assert out.output.startswith("x" * 100 + "\n[... truncated: showed the first 100 of 1000 bytes")
    assert "x" * 101 not in out.output


async def test_default_read_cap(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    (workspace / "big.log").write_bytes(b"line\n" * 100_000)  # 500 KB
    out = await file_call(workspace, "read", "big.log")
    assert "showed the first 262144 of 500000 bytes" in out.output
    assert len(out.output) < 263_000


async def test_write_cap(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    out = await file_call(workspace, "write", "huge.txt", "y" * (1024 * 1024 + 1))
    assert out.is_error and "the limit is 1048576 bytes" in out.output
    assert not (workspace / "huge.txt").exists()


async def test_list_cap(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    for i in range(12):
        (workspace / f"f{i:02d}").write_text("")
    tool = FileTool(list_cap_entries=5)
    out = await run_tool(
        {"file": tool},
        "file",
        json.dumps({"action": "list", "path": ".", "content": None}),
        ctx_for(workspace),
    )
    lines = out.output.splitlines()
    assert lines[0] == ".: 12 entries"
    assert lines[1:6] == [f"f{i:02d}  file, 0 bytes" for i in range(5)]
    assert lines[6] == "[... 7 more entries not shown ...]"


async def test_helpful_errors(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    (workspace / "dir").mkdir()
    (workspace / "bin.dat").write_bytes(b"\x00\x01\x02")
    cases = [
        (("read", "missing.txt", None), "error: no such file: missing.txt"),
        (("read", "dir", None), "error: dir is a directory; use the list action"),
        (("list", "bin.dat", None), "error: bin.dat is a file, not a directory"),
        (("write", "dir", "x"), "error: dir is a directory"),
        (("write", "a.txt", None), "error: 'content' is required for write (it was null)"),
        (("read", "bin.dat", None), "error: bin.dat is a binary file (3 bytes); not shown"),
        (("write", "bin.dat/x.txt", "x"), "error: a parent of bin.dat/x.txt is a file"),
    ]
    for (action, path, content), expected in cases:
        out = await file_call(workspace, action, path, content)
        assert out.is_error, (action, path)
        assert out.output.startswith(expected), out.output


async def test_fifo_does_not_hang(layout: tuple[Path, Path]) -> None:
    workspace, _ = layout
    os.mkfifo(workspace / "pipe")
    out = await file_call(workspace, "read", "pipe")
    assert out == ToolOutcome("error: pipe is not a regular file", True)


async def test_agent_workspace_helpers(tmp_path: Path) -> None:
    path = await ensure_agent_workspace(tmp_path / "workspaces", "researcher")
    assert path == tmp_path / "workspaces" / "researcher"
    assert path.is_dir()
    assert (path.stat().st_mode & 0o777) == 0o700
    for bad in ("", "..", "a/b"):
        with pytest.raises(ValueError):
            agent_workspace_path(tmp_path, bad)


async def test_directory_swapped_for_symlink_after_the_check_is_refused(
    layout: tuple[Path, Path],
) -> None:
    """The race: the path is checked, then a directory on it becomes a symlink that leads
    out before the file is opened. Opening component by component without following
    symlinks refuses it."""
    from pingu.tools.base import ToolError
    from pingu.tools.workspace import confine, open_confined

    workspace, outside = layout
    (workspace / "docs").mkdir()
    (workspace / "docs" / "secret.txt").write_text("harmless")
    root, parts = confine(workspace, "docs/secret.txt")
    (workspace / "docs" / "secret.txt").unlink()
    (workspace / "docs").rmdir()
    (workspace / "docs").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ToolError, match="symlink"):
        open_confined(root, parts, os.O_RDONLY)
    with pytest.raises(ToolError, match="symlink"):
        open_confined(root, parts, os.O_WRONLY | os.O_TRUNC)
    assert (outside / "secret.txt").read_text() == "the launch codes"


async def test_final_component_swapped_for_symlink_is_not_followed(
    layout: tuple[Path, Path],
) -> None:
    from pingu.tools.base import ToolError
    from pingu.tools.workspace import confine, open_confined

    workspace, outside = layout
    (workspace / "out.txt").write_text("mine")
    root, parts = confine(workspace, "out.txt")
    (workspace / "out.txt").unlink()
    (workspace / "out.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(ToolError, match="symlink"):
        open_confined(root, parts, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    assert (outside / "secret.txt").read_text() == "the launch codes"
