-- The fencing token of each lock (issue 26, docs/fencing.md). The statement
-- that takes a lock advances its row here in the same statement (a
-- data-modifying CTE), so every run that holds a lock gets a token strictly
-- greater than every earlier run's token of that lock, from any replica,
-- through restarts and failovers: the counter commits with the lock. A
-- downstream write that carries the token and refuses a token lower than
-- the last one it accepted cannot be made by a holder that was paused past
-- its lock.
--
-- The ShedLock table is untouched: Java nodes keep taking the same locks
-- and do not advance the token (their runs have none).

-- +goose Up
CREATE TABLE studio_fence (
    lock_name  text        PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE studio_fence;
