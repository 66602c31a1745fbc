-- Agent runs (pingu.store.executions). Timestamps: Unix ms.

-- name: executions_insert!
INSERT INTO agent_executions (id, session_id, agent_name, parent_id, status, input,
                              retry_count, started_at)
VALUES (:id, :session_id, :agent_name, :parent_id, 'running', :input, 0, :started_at);

-- name: executions_finish!
UPDATE agent_executions
SET status = :status, output = :output, error = :error, completed_at = :completed_at
WHERE id = :id;

-- name: executions_set_retrying!
UPDATE agent_executions
SET status = 'retrying', retry_count = :retry_count
WHERE id = :id;

-- name: executions_set_running!
UPDATE agent_executions
SET status = 'running'
WHERE id = :id AND status = 'retrying';

-- name: executions_mark_interrupted!
UPDATE agent_executions
SET status = 'failed', error = :error, completed_at = :completed_at
WHERE status IN ('pending', 'running', 'retrying');

-- name: executions_get^
SELECT id, session_id, agent_name, parent_id, status, input, output, error, retry_count,
       started_at, completed_at
FROM agent_executions
WHERE id = :id;

-- name: executions_list_for_session
SELECT id, session_id, agent_name, parent_id, status, input, output, error, retry_count,
       started_at, completed_at
FROM agent_executions
WHERE session_id = :session_id
ORDER BY started_at, rowid;
