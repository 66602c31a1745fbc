-- The inbound update ledger and the current session of each chat (pingu.store.inbound).
-- Timestamps: Unix ms.

-- name: inbound_set_reply_message!
UPDATE inbound_updates SET reply_message_id = :message_id, updated_at = :now
WHERE channel = :channel AND update_id = :update_id;

-- name: inbound_set_chunks_sent!
UPDATE inbound_updates SET chunks_sent = :chunks_sent, updated_at = :now
WHERE channel = :channel AND update_id = :update_id;

-- name: inbound_add_attempt$
UPDATE inbound_updates SET attempts = attempts + 1, updated_at = :now
WHERE channel = :channel AND update_id = :update_id
RETURNING attempts;

-- name: inbound_mark_done!
UPDATE inbound_updates SET status = :status, updated_at = :now
WHERE channel = :channel AND update_id = :update_id;

-- name: inbound_get^
SELECT channel, update_id, chat_key, payload, status, reply_message_id, chunks_sent, attempts,
       created_at, updated_at
FROM inbound_updates
WHERE channel = :channel AND update_id = :update_id;

-- name: inbound_unfinished
SELECT channel, update_id, chat_key, payload, status, reply_message_id, chunks_sent, attempts,
       created_at, updated_at
FROM inbound_updates
WHERE channel = :channel AND status = 'pending'
ORDER BY update_id;

-- name: inbound_max_update_id$
SELECT max(update_id) FROM inbound_updates WHERE channel = :channel;

-- name: inbound_current_session$
SELECT session_id FROM channel_sessions WHERE chat_key = :chat_key;

-- name: inbound_set_current_session!
INSERT INTO channel_sessions (chat_key, session_id, updated_at)
VALUES (:chat_key, :session_id, :now)
ON CONFLICT (chat_key) DO UPDATE SET session_id = excluded.session_id,
                                     updated_at = excluded.updated_at;

-- name: inbound_accept_batch
-- A getUpdates batch in one statement (one transaction, one round trip): :batch is a JSON
-- array of {"update_id", "chat_key", "payload"}; returns the update_ids that were new.
-- (`WHERE true` lets SQLite parse the upsert after a SELECT.)
INSERT INTO inbound_updates (channel, update_id, chat_key, payload, status, created_at,
                             updated_at)
SELECT :channel, json_extract(value, '$.update_id'), json_extract(value, '$.chat_key'),
       json_extract(value, '$.payload'), 'pending', :now, :now
FROM json_each(:batch)
WHERE true
ON CONFLICT (channel, update_id) DO NOTHING
RETURNING update_id;

-- name: inbound_accept_unrecordable!
-- An update whose payload could not be stored: a minimal row, closed as ignored, so that
-- the offset can move past it (nothing else of it is kept).
INSERT INTO inbound_updates (channel, update_id, chat_key, payload, status, created_at,
                             updated_at)
VALUES (:channel, :update_id, :chat_key, :payload, 'ignored', :now, :now)
ON CONFLICT (channel, update_id) DO NOTHING;

-- name: inbound_new_session$
SELECT new_session FROM inbound_updates WHERE channel = :channel AND update_id = :update_id;

-- name: inbound_set_new_session!
UPDATE inbound_updates SET new_session = :session_id, updated_at = :now
WHERE channel = :channel AND update_id = :update_id;
