-- Turns record how they ended and which inbound update caused them; agent runs and the
-- tokens they used get their own tables (the data model of seed 002).

ALTER TABLE turns ADD COLUMN status TEXT NOT NULL DEFAULT 'completed'
    CHECK (status IN ('completed', 'failed', 'cancelled', 'limited'));
ALTER TABLE turns ADD COLUMN error TEXT;
ALTER TABLE turns ADD COLUMN agent TEXT;
-- The key of the inbound update that caused the turn (e.g. 'telegram:123456'), so that a
-- restarted daemon can tell the update was already answered.
ALTER TABLE turns ADD COLUMN inbound_ref TEXT;

CREATE UNIQUE INDEX idx_turns_inbound_ref ON turns (inbound_ref) WHERE inbound_ref IS NOT NULL;

CREATE TABLE agent_executions (
    id           TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL,
    agent_name   TEXT NOT NULL,
    parent_id    TEXT REFERENCES agent_executions (id) ON DELETE SET NULL,
    status       TEXT NOT NULL
        CHECK (status IN ('pending', 'running', 'completed', 'failed', 'retrying')),
    input        TEXT NOT NULL,  -- JSON
    output       TEXT,           -- JSON
    error        TEXT,
    retry_count  INTEGER NOT NULL DEFAULT 0,
    started_at   INTEGER NOT NULL,  -- Unix ms
    completed_at INTEGER            -- Unix ms
);

CREATE INDEX idx_agent_executions_session ON agent_executions (session_id, started_at);
CREATE INDEX idx_agent_executions_parent ON agent_executions (parent_id);
-- mark_interrupted after a restart looks for unfinished runs only.
CREATE INDEX idx_agent_executions_unfinished ON agent_executions (status)
    WHERE status IN ('pending', 'running', 'retrying');

CREATE TABLE token_usage (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id        TEXT REFERENCES agent_executions (id) ON DELETE SET NULL,
    session_id          TEXT,
    agent_name          TEXT,
    provider            TEXT NOT NULL,
    model               TEXT NOT NULL,
    api_key_hash        TEXT,  -- SHA-256 of the key, never the key
    input_tokens        INTEGER NOT NULL DEFAULT 0,
    cached_input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens       INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens    INTEGER NOT NULL DEFAULT 0,
    total_tokens        INTEGER NOT NULL DEFAULT 0,
    cost_estimate       REAL,  -- USD; NULL when the model has no known price
    created_at          INTEGER NOT NULL  -- Unix ms
);

-- usage totals: all time / since a moment, per session or overall.
CREATE INDEX idx_token_usage_created_at ON token_usage (created_at);
CREATE INDEX idx_token_usage_session ON token_usage (session_id, created_at);
CREATE INDEX idx_token_usage_execution ON token_usage (execution_id);

-- Saving a turn is then one INSERT, one implicit transaction: the session row is created if
-- the caller never did (channel: the part of the id before ':'), and touched otherwise.
CREATE TRIGGER turns_touch_session BEFORE INSERT ON turns
BEGIN
    INSERT INTO sessions (id, channel, created_at, updated_at)
    VALUES (
        NEW.session_id,
        CASE WHEN instr(NEW.session_id, ':') > 0
             THEN substr(NEW.session_id, 1, instr(NEW.session_id, ':') - 1)
             ELSE NEW.session_id END,
        coalesce(NEW.created_at, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        coalesce(NEW.created_at, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    )
    ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at;
END;
