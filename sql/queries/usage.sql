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
