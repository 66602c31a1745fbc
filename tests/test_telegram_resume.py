"""Resuming updates a previous process left unfinished, by how their saved turn ended:
a cancelled turn (a shutdown cut it short) is run again; a failed or limited turn was
an answer, and what the live turn said is delivered without asking the model again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pingu.store.db import Database
from tests.fakes.daemon import DaemonStarter
from tests.fakes.responses_api import FakeResponsesAPI, Reply, text
from tests.fakes.telegram_api import FakeTelegram
from tests.test_telegram_e2e import config_for, user_text, wait_answers

CANCELLED_ONCE, CANCELLED_TWICE, FAILED, LIMITED = 701, 702, 703, 704
LIMIT_TEXT = "I stopped after 16 model calls without finishing."


def assistant_message(content: str) -> dict[str, Any]:
    """An output item as the Responses API returns it."""
    return {
        "id": "msg_0001",
        "type": "message",
        "role": "assistant",
        "status": "incomplete",
        "content": [{"type": "output_text", "text": content, "annotations": []}],
    }


async def test_resume_reruns_cancelled_turns_and_delivers_failed_and_limited_ones(
    tmp_path: Path,
    fake_telegram: FakeTelegram,
    fake_responses: FakeResponsesAPI,
    pingu_daemon: DaemonStarter,
) -> None:
    tg = fake_telegram

    def echo(body: dict[str, Any]) -> Reply:
        return text(f"Answer to: {user_text(body)}")

    fake_responses.responder = echo
    chats = (CANCELLED_ONCE, CANCELLED_TWICE, FAILED, LIMITED)
    config = config_for(tmp_path, tg, fake_responses, allowed=chats)

    # What a crashed process left: each update recorded (and, as Telegram does for
    # unconfirmed updates, offered again), its turn saved, no answer delivered.
    db = await Database.open(tmp_path / "state" / "pingu.db")
    try:
        for chat in chats:
            update_id = tg.push_text(chat, chat, f"question {chat}")
            payload = next(u for u in tg._updates if u["update_id"] == update_id)
            assert await db.inbound.accept("tg", update_id, f"telegram:{chat}", payload)
            ref, session = f"telegram:{update_id}", f"telegram:{chat}"
            partial = [assistant_message("Half an ans")]

            async def save(
                status: str,
                ref: str,
                error: str | None = None,
                session=session,
                chat=chat,
                partial=partial,
            ) -> None:
                await db.history.save_turn(
                    session, f"question {chat}", partial, model="m", status=status,
                    error=error, inbound_ref=ref,
                )  # fmt: skip

            if chat == CANCELLED_ONCE:
                await save("cancelled", ref, "cancelled by the user")
            elif chat == CANCELLED_TWICE:
                await save("cancelled", ref, "cancelled by the user")
                await save("cancelled", f"{ref}#2", "cancelled by the user")
            elif chat == FAILED:
                await save("failed", ref, "unavailable: the model service is unavailable")
            else:
                await save("limited", ref, LIMIT_TEXT)
    finally:
        await db.close()

    daemon = await pingu_daemon(config)
    await wait_answers(tg, CANCELLED_ONCE, [f"Answer to: question {CANCELLED_ONCE}"])
    await wait_answers(tg, CANCELLED_TWICE, [f"Answer to: question {CANCELLED_TWICE}"])
    await wait_answers(tg, FAILED, ["Sorry, something went wrong while answering this message."])
    await wait_answers(tg, LIMITED, [LIMIT_TEXT])
    await tg.wait_until_idle()
    assert await daemon.terminate() == 0

    # Only the cancelled turns went to the model again.
    asked = sorted(user_text(b) for b in fake_responses.bodies)
    assert asked == [f"question {CANCELLED_ONCE}", f"question {CANCELLED_TWICE}"]
    db = await Database.open(tmp_path / "state" / "pingu.db")
    try:
        reruns = {
            chat: [
                (t.status, t.inbound_ref) for t in await db.history.list_turns(f"telegram:{chat}")
            ]
            for chat in (CANCELLED_ONCE, CANCELLED_TWICE)
        }
        assert [s for s, _ in reruns[CANCELLED_ONCE]] == ["cancelled", "completed"]
        assert reruns[CANCELLED_ONCE][1][1].endswith("#2")
        assert [s for s, _ in reruns[CANCELLED_TWICE]] == ["cancelled", "cancelled", "completed"]
        assert reruns[CANCELLED_TWICE][2][1].endswith("#3")
        assert await db.inbound.unfinished("tg") == []
        statuses = {}
        for chat in chats:
            rows = [r for r in await _all_rows(db) if r.chat_key == f"telegram:{chat}"]
            statuses[chat] = rows[0].status
        assert statuses == {
            CANCELLED_ONCE: "done", CANCELLED_TWICE: "done", FAILED: "failed", LIMITED: "done"
        }  # fmt: skip
    finally:
        await db.close()


async def _all_rows(db: Database) -> list[Any]:
    rows = []
    for update_id in range(100_000_001, 100_000_010):
        row = await db.inbound.get("tg", update_id)
        if row is not None:
            rows.append(row)
    return rows
