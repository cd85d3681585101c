-- Which process holds a replica's row, beyond its pid (issue 26's finding
-- "A replica that starts during a database fault can exit 1",
-- docs/replica-start.md "A restart on the same machine"): the kernel's boot
-- id and the pid namespace of the process that registered, as
-- "<boot_id>/pid:[<inode>]". A process that registers with the id of a
-- live row may take it over at once, without waiting for the heartbeat to
-- be 15 s old, when the row's process is of its own machine's boot and pid
-- namespace and its pid is no longer a process there: the holder has
-- ended. NULL (a row written by an older studioctl, or a system without
-- /proc) proves nothing, and the row is refused while live, as before.

-- +goose Up
ALTER TABLE studio_replica ADD COLUMN process text NULL;

-- +goose Down
ALTER TABLE studio_replica DROP COLUMN process;
