-- Token usage (pingu.store.usage). Timestamps: Unix ms. Filters are optional: NULL means all.

-- name: usage_insert!
INSERT INTO token_usage (execution_id, session_id, agent_name, provider, model, api_key_hash,
                         input_tokens, cached_input_tokens, output_tokens, reasoning_tokens,
                         total_tokens, cost_estimate, created_at)
VALUES (:execution_id, :session_id, :agent_name, :provider, :model, :api_key_hash,
        :input_tokens, :cached_input_tokens, :output_tokens, :reasoning_tokens,
        :total_tokens, :cost_estimate, :created_at);

-- name: usage_totals_by_model
SELECT model AS key, count(*) AS calls, sum(input_tokens) AS input_tokens,
       sum(cached_input_tokens) AS cached_input_tokens, sum(output_tokens) AS output_tokens,
       sum(reasoning_tokens) AS reasoning_tokens, sum(total_tokens) AS total_tokens,
       sum(cost_estimate) AS cost_estimate, count(cost_estimate) AS priced_calls
FROM token_usage
WHERE (:session_id IS NULL OR session_id = :session_id)
  AND (:since IS NULL OR created_at >= :since)
GROUP BY model
ORDER BY model;

-- name: usage_totals_by_agent
SELECT coalesce(agent_name, '') AS key, count(*) AS calls, sum(input_tokens) AS input_tokens,
       sum(cached_input_tokens) AS cached_input_tokens, sum(output_tokens) AS output_tokens,
       sum(reasoning_tokens) AS reasoning_tokens, sum(total_tokens) AS total_tokens,
       sum(cost_estimate) AS cost_estimate, count(cost_estimate) AS priced_calls
FROM token_usage
WHERE (:session_id IS NULL OR session_id = :session_id)
  AND (:since IS NULL OR created_at >= :since)
GROUP BY coalesce(agent_name, '')
ORDER BY 1;

-- name: usage_totals_by_day
-- Days in UTC.
SELECT strftime('%Y-%m-%d', created_at / 1000, 'unixepoch') AS key, count(*) AS calls,
       sum(input_tokens) AS input_tokens, sum(cached_input_tokens) AS cached_input_tokens,
       sum(output_tokens) AS output_tokens, sum(reasoning_tokens) AS reasoning_tokens,
       sum(total_tokens) AS total_tokens, sum(cost_estimate) AS cost_estimate,
       count(cost_estimate) AS priced_calls
FROM token_usage
WHERE (:session_id IS NULL OR session_id = :session_id)
  AND (:since IS NULL OR created_at >= :since)
GROUP BY 1
ORDER BY 1;

-- name: usage_totals_for_chat
-- One chat's usage by model: its first session (:chat_key), those /new started
-- ('{chat_key}#2', ...) and their sub-agents' ('...:delegate:<agent>'). Prefixes are
-- matched as ranges [prefix, prefix_end) so that the session index is used.
SELECT model AS key, count(*) AS calls, sum(input_tokens) AS input_tokens,
       sum(cached_input_tokens) AS cached_input_tokens, sum(output_tokens) AS output_tokens,
       sum(reasoning_tokens) AS reasoning_tokens, sum(total_tokens) AS total_tokens,
       sum(cost_estimate) AS cost_estimate, count(cost_estimate) AS priced_calls
FROM token_usage
WHERE session_id = :chat_key
   OR (session_id >= :numbered AND session_id < :numbered_end)
   OR (session_id >= :delegated AND session_id < :delegated_end)
GROUP BY model
ORDER BY model;

-- name: usage_chat_conversations$
-- How many conversations (sessions, sub-agents' not counted) a chat has had.
SELECT count(*) FROM sessions
WHERE (id = :chat_key OR (id >= :numbered AND id < :numbered_end))
  AND instr(id, ':delegate:') = 0;
