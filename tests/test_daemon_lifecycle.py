"""`pingu gateway` as a process: config errors, startup, SIGTERM with turns running,
a forced stop, restart recovery, and no secret in its stderr."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import aiohttp

from pingu.store.db import Database
from tests.fakes.daemon import (
    DaemonProcess,
    DaemonStarter,
    daemon_env,
    sse_events,
    wait_until,
    write_config,
)
from tests.fakes.responses_api import FakeResponsesAPI, hang, slow, text

GATEWAY_TOKEN = "gw-lifecycle-token-5d2e"
AUTH = {"Authorization": f"Bearer {GATEWAY_TOKEN}"}


async def saved_turns(db_path: Path, session_id: str) -> list[Any]:
    db = await Database.open(db_path)
    try:
        return await db.history.list_turns(session_id)
    finally:
        await db.close()


class ChatStream:
    """A /v1/chat request read event by event while the test does other things."""

    def __init__(self, http: aiohttp.ClientSession, daemon: DaemonProcess, body: dict) -> None:
        self._http, self._daemon, self._body = http, daemon, body
        self.events: list[tuple[str, Any]] = []
        self._raw = b""
        self.first_event = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> list[tuple[str, Any]]:
        async with self._http.post(
            self._daemon.url("/v1/chat"), json=self._body, headers=AUTH
        ) as response:
            assert response.status == 200, await response.text()
            async for chunk in response.content.iter_any():
                self._raw += chunk
                self.events = sse_events(self._raw.decode())
                if self.events:
                    self.first_event.set()
        return self.events

    async def result(self) -> list[tuple[str, Any]]:
        return await asyncio.wait_for(self.task, 30)


# -- config errors -----------------------------------------------------------------------


async def test_config_error_exits_2_with_one_line_and_nothing_started(
    tmp_path: Path, pingu_daemon: DaemonStarter
) -> None:
    config = tmp_path / "config.toml"
    db_path = tmp_path / "state" / "pingu.db"
    config.write_text(f'[db]\npath = "{db_path}"\n[gateway]\naddr = "nowhere"\n')

    daemon = await pingu_daemon(config, ready=False)

    assert await daemon.wait() == 2
    assert len(daemon.lines) == 1, daemon.stderr
    assert "config error" in daemon.lines[0] and "gateway.addr" in daemon.lines[0]
    assert "Traceback" not in daemon.stderr
    assert not db_path.exists(), "the database was opened despite the config error"


async def test_missing_config_file_and_bad_toml_exit_2(
    tmp_path: Path, pingu_daemon: DaemonStarter
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[gateway\naddr = "x"\n')
    for config in (tmp_path / "missing.toml", bad):
        daemon = await pingu_daemon(config, ready=False)
        assert await daemon.wait() == 2
        assert len(daemon.lines) == 1, daemon.stderr
        assert str(config) in daemon.lines[0]
        assert "Traceback" not in daemon.stderr


async def test_bad_addr_option_exits_2(tmp_path: Path, pingu_daemon: DaemonStarter) -> None:
    config = write_config(tmp_path)
    daemon = await pingu_daemon(config, "--addr", "no-port-here", ready=False)
    assert await daemon.wait() == 2
    assert "--addr" in daemon.stderr and "Traceback" not in daemon.stderr


async def test_address_in_use_exits_1(
    tmp_path: Path, fake_responses: FakeResponsesAPI, pingu_daemon: DaemonStarter
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path, fake_responses, addr=f"127.0.0.1:{port}")
        daemon = await pingu_daemon(config, ready=False)
        assert await daemon.wait() == 1
    [failed] = daemon.find("startup_failed")
    assert f"127.0.0.1:{port}" in failed["error"]
    assert daemon.find("database_closed"), "the database was not closed after a failed start"


# -- SIGTERM -----------------------------------------------------------------------------


async def test_sigterm_lets_a_running_turn_finish_within_the_grace(
    tmp_path: Path, fake_responses: FakeResponsesAPI, pingu_daemon: DaemonStarter
) -> None:
    config = write_config(tmp_path, fake_responses, token=GATEWAY_TOKEN)
    daemon = await pingu_daemon(config, grace=20)
    fake_responses.queue(slow(text("one two three four five", chunks=5), delta_delay_s=0.2))
    async with aiohttp.ClientSession() as http:
        stream = ChatStream(http, daemon, {"session_id": "http:grace", "message": "count"})
        await asyncio.wait_for(stream.first_event.wait(), 20)
        daemon.send_signal()
        events = await stream.result()

    assert await daemon.wait() == 0
    assert events[-1][0] == "done"
    assert events[-1][1]["status"] == "completed"
    assert events[-1][1]["text"] == "one two three four five"
    assert "".join(d["text"] for name, d in events if name == "token") == (
        "one two three four five"
    )
    [turn] = await saved_turns(tmp_path / "state" / "pingu.db", "http:grace")
    assert turn.status == "completed"
    assert [e["event"] for e in daemon.events if e["event"] in ("stopping", "turn", "stopped")] == [
        "stopping",
        "turn",
        "stopped",
    ]


async def test_sigterm_cancels_a_turn_longer_than_the_grace(
    tmp_path: Path, fake_responses: FakeResponsesAPI, pingu_daemon: DaemonStarter
) -> None:
    config = write_config(tmp_path, fake_responses, token=GATEWAY_TOKEN)
    daemon = await pingu_daemon(config, grace=0.5)
    fake_responses.queue(hang())
    async with aiohttp.ClientSession() as http:
        stream = ChatStream(http, daemon, {"session_id": "http:long", "message": "forever"})
        await wait_until(lambda: fake_responses.requests)
        daemon.send_signal()
        events = await stream.result()

    assert await daemon.wait() == 0
    assert events[-1][0] == "done" and events[-1][1]["status"] == "cancelled"
    [turn] = await saved_turns(tmp_path / "state" / "pingu.db", "http:long")
    assert turn.status == "cancelled"
    assert turn.user_message == "forever"
    assert daemon.find("drain_cancelling")


async def test_second_signal_cancels_at_once(
    tmp_path: Path, fake_responses: FakeResponsesAPI, pingu_daemon: DaemonStarter
) -> None:
    config = write_config(tmp_path, fake_responses, token=GATEWAY_TOKEN)
    daemon = await pingu_daemon(config, grace=120)
    fake_responses.queue(hang())
    async with aiohttp.ClientSession() as http:
        stream = ChatStream(http, daemon, {"session_id": "http:forced", "message": "wait"})
        await wait_until(lambda: fake_responses.requests)
        daemon.send_signal()
        await daemon.wait_for("stopping")
        async with http.get(daemon.url("/healthz")) as r:
            assert r.status == 503
            assert await r.json() == {"status": "stopping"}
        daemon.send_signal()
        events = await stream.result()

    assert await daemon.wait() == 0
    assert daemon.find("stop_forced")
    assert events[-1][1]["status"] == "cancelled"
    [turn] = await saved_turns(tmp_path / "state" / "pingu.db", "http:forced")
    assert turn.status == "cancelled"


# -- recovery and secrets ----------------------------------------------------------------


async def test_executions_left_running_are_marked_interrupted(
    tmp_path: Path, fake_responses: FakeResponsesAPI, pingu_daemon: DaemonStarter
) -> None:
    db_path = tmp_path / "state" / "pingu.db"
    db = await Database.open(db_path)
    execution_id = await db.executions.start("http:old", "default", {"message": "hi"})
    await db.close()

    daemon = await pingu_daemon(write_config(tmp_path, fake_responses))
    assert daemon.find("executions_interrupted")[0]["count"] == 1
    assert await daemon.terminate() == 0

    db = await Database.open(db_path)
    try:
        row = await db.executions.get(execution_id)
    finally:
        await db.close()
    assert row is not None and row.status == "failed"
    assert row.error == "interrupted by restart"


async def test_no_secret_reaches_stderr_even_after_errors(
    tmp_path: Path, fake_responses: FakeResponsesAPI, pingu_daemon: DaemonStarter
) -> None:
    wrong_key = "sk-wrong-key-abcdef0123456789"
    bot_token = "7654321098:AAFakeBotTokenForRedactionTest12345"
    config = write_config(
        tmp_path,
        fake_responses,
        token=GATEWAY_TOKEN,
        api_key=wrong_key,  # the fake answers 401 invalid_api_key
        log_level="debug",
        extra=(
            '[channel.tg]\ntype = "telegram"\nenabled = false\n'
            f'[channel.tg.settings]\nbot_token = "{bot_token}"\n'
        ),
    )
    daemon = await pingu_daemon(config, env=daemon_env({"PYTHONWARNINGS": "always"}))
    async with aiohttp.ClientSession() as http:
        async with http.post(
            daemon.url("/v1/chat"),
            json={"session_id": "http:secret", "message": f"is {bot_token} safe?"},
            headers=AUTH,
        ) as r:
            events = sse_events(await r.text())
        async with http.get(
            daemon.url("/v1/sessions"), headers={"Authorization": f"Bearer {wrong_key}"}
        ) as r:
            assert r.status == 401
    assert await daemon.terminate() == 0

    assert fake_responses.requests[-1].status == 401
    names = [name for name, _ in events]
    assert "error" in names and events[-1][1]["status"] == "failed"
    for name, data in events:
        assert wrong_key not in str(data), name
    assert daemon.find("turn", status="failed")
    stderr = daemon.stderr
    for secret in (wrong_key, GATEWAY_TOKEN, bot_token, bot_token.split(":")[1]):
        assert secret not in stderr


async def test_state_dir_and_db_flags_place_the_database(
    tmp_path: Path, pingu_daemon: DaemonStarter
) -> None:
    # No [state] or [db] in the file: the flags decide, as the systemd unit's env does.
    config = tmp_path / "config.toml"
    config.write_text('[gateway]\naddr = "127.0.0.1:0"\n[log]\nformat = "json"\n', encoding="utf-8")
    state = tmp_path / "state"
    daemon = await pingu_daemon(config, "--state-dir", str(state))
    [starting] = daemon.find("starting")
    assert starting["database"] == str(state / "pingu.db")
    assert await daemon.terminate() == 0
    assert (state / "pingu.db").is_file()

    elsewhere = tmp_path / "elsewhere.db"
    daemon = await pingu_daemon(config, "--state-dir", str(state), "--db", str(elsewhere))
    assert daemon.find("starting")[0]["database"] == str(elsewhere)
    assert await daemon.terminate() == 0
    assert elsewhere.is_file()
