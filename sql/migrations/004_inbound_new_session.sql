-- The session a `/new` update started, recorded in the same transaction that points the
-- chat at it: a resumed `/new` (the process died before its reply was done) finds it
-- here and does not move the chat a second time.
ALTER TABLE inbound_updates ADD COLUMN new_session TEXT;
