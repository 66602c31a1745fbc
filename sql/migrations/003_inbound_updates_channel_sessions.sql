-- The ledger of inbound channel updates (Telegram), for exactly-once handling across
-- restarts, and the session each chat currently talks to (so /new can start afresh).

CREATE TABLE inbound_updates (
    channel          TEXT NOT NULL,
    update_id        INTEGER NOT NULL,
    chat_key         TEXT NOT NULL,
    payload          TEXT NOT NULL,  -- JSON of the update as received
    status           TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'done', 'failed', 'ignored')),
    reply_message_id INTEGER,
    chunks_sent      INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,  -- Unix ms
    updated_at       INTEGER NOT NULL,  -- Unix ms
    PRIMARY KEY (channel, update_id)
);

-- unfinished(channel) after a restart.
CREATE INDEX idx_inbound_updates_pending ON inbound_updates (channel, update_id)
    WHERE status = 'pending';

CREATE TABLE channel_sessions (
    chat_key   TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    updated_at INTEGER NOT NULL  -- Unix ms
);
