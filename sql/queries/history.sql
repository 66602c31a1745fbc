-- Sessions and turns (pingu.history.HistoryStore). Timestamps: ISO-8601 UTC text.

-- name: history_ensure_session!
-- Create the session, or touch updated_at (and fill model/title/channel_id if given).
INSERT INTO sessions (id, channel, channel_id, title, model, created_at, updated_at)
VALUES (:id, :channel, :channel_id, :title, :model,
        strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
ON CONFLICT (id) DO UPDATE SET
    updated_at = excluded.updated_at,
    channel_id = coalesce(excluded.channel_id, sessions.channel_id),
    title = coalesce(excluded.title, sessions.title),
    model = coalesce(excluded.model, sessions.model);

-- name: history_insert_turn<!
-- The trigger turns_touch_session creates or touches the session in the same statement.
INSERT INTO turns (session_id, user_message, response_json, model, status, error, agent,
                   inbound_ref, created_at)
VALUES (:session_id, :user_message, :response_json, :model, :status, :error, :agent,
        :inbound_ref, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));

-- name: history_get_session^
SELECT id, channel, channel_id, title, model, summary, summary_up_to, created_at, updated_at,
       (SELECT count(*) FROM turns WHERE turns.session_id = sessions.id) AS turn_count
FROM sessions
WHERE id = :id;

-- name: history_list_sessions
SELECT id, channel, channel_id, title, model, summary, summary_up_to, created_at, updated_at,
       (SELECT count(*) FROM turns WHERE turns.session_id = sessions.id) AS turn_count
FROM sessions
ORDER BY updated_at DESC, id
LIMIT :limit;

-- name: history_list_turns
SELECT id, session_id, user_message, response_json, model, status, error, agent, inbound_ref,
       created_at
FROM turns
WHERE session_id = :session_id
ORDER BY id;

-- name: history_input_rows
-- Only what load_input_history needs, in order: this is the hot read.
SELECT user_message, response_json, status
FROM turns
WHERE session_id = :session_id
ORDER BY id;

-- name: history_count_turns$
SELECT count(*) FROM turns WHERE session_id = :session_id;

-- name: history_turn_for_inbound^
SELECT id, session_id, user_message, response_json, model, status, error, agent, inbound_ref,
       created_at
FROM turns
WHERE inbound_ref = :inbound_ref;
