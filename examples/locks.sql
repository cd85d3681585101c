-- The Locks scenario of README.md: three rows in the ShedLock table, written
-- as ShedLock writes them (UTC wall-clock times in timestamp columns).
--   nightly-report  held for 10 more minutes by a Java node (not a replica id)
--   old-job         written by another Java node, expired an hour ago
--   sweep           held for 3 more minutes by web-2, a replica that is gone
--                   (the tour drained it), as a replica killed while it held
--                   the lock leaves it
-- Run it against the installation's database, e.g. the embedded one:
--   PGPASSFILE=/var/lib/studioctl/embedded/pgpass psql 'host=127.0.0.1 port=54329 user=postgres dbname=studio sslmode=disable' -f examples/locks.sql
-- (studioctl embedded status prints that line for your folder), or
--   psql "$STUDIO_DATABASE_URL" -f examples/locks.sql
-- Run again, it puts the three rows back as they were.
INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES
  ('nightly-report', timezone('utc', now()) + interval '10 minutes', timezone('utc', now()),                       'java-node-1'),
  ('old-job',        timezone('utc', now()) - interval '1 hour',     timezone('utc', now()) - interval '2 hours',  'java-node-2'),
  ('sweep',          timezone('utc', now()) + interval '3 minutes',  timezone('utc', now()) - interval '2 minutes', 'web-2')
ON CONFLICT (name) DO UPDATE
  SET lock_until = EXCLUDED.lock_until, locked_at = EXCLUDED.locked_at, locked_by = EXCLUDED.locked_by;
