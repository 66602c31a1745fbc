-- The schema of the original Go Pingu (docs/storage.md, "Schema"). A database the Go
-- daemon wrote already has these tables, hence IF NOT EXISTS: applying this migration to
-- it changes nothing but the version, which makes it "version 1".

CREATE TABLE IF NOT EXISTS sessions (
    id            TEXT PRIMARY KEY,
    channel       TEXT NOT NULL DEFAULT '',
    channel_id    TEXT,
    title         TEXT,
    model         TEXT,
    summary       TEXT,
    summary_up_to INTEGER,
    created_at    DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at    DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

CREATE TABLE IF NOT EXISTS turns (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_message  TEXT NOT NULL,
    response_json TEXT NOT NULL,
    model         TEXT,
    created_at    DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- Reserved by the Go design for per-message storage; nothing writes it yet.
CREATE TABLE IF NOT EXISTS messages (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    turn_id    INTEGER REFERENCES turns (id) ON DELETE CASCADE,
    role       TEXT NOT NULL,
    content    TEXT NOT NULL,
    created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- load_input_history and list_turns: every turn of one session in order.
CREATE INDEX IF NOT EXISTS idx_turns_session_id ON turns (session_id, id);
-- list_sessions: most recently active first.
CREATE INDEX IF NOT EXISTS idx_sessions_updated_at ON sessions (updated_at);
CREATE INDEX IF NOT EXISTS idx_messages_session_id ON messages (session_id, id);
