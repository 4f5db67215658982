-- +goose Up

-- Every item of a task is updated once, when its message is settled
-- (outcome, detail). A settlement updates a batch of consecutive items, so
-- all the rows of a page change in one transaction, and the old versions
-- cannot be pruned before it commits: a new version stays on its page
-- (a HOT update, no entry in the primary key) only if the page has room
-- for a second version of every row on it. An unsettled item takes about
-- 44 bytes of a page, a settled one about 60: with fillfactor 80 only one
-- update in four or five stayed on its page; with 40 all of them do
-- (docs/BENCHMARKS.md, Replay). Items take about twice the space.
ALTER TABLE replay_task_items SET (fillfactor = 40);

-- +goose Down
ALTER TABLE replay_task_items SET (fillfactor = 80);
