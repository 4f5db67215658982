-- +goose Up

-- A tick claimed by the holder of a job while its previous run is still
-- going waits for that run; when a later tick comes first, the waiting one is
-- recorded as skipped (see package cleanup). Every claimed tick thus ends
-- with an outcome that says what happened to it.
ALTER TABLE job_runs DROP CONSTRAINT job_runs_outcome_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_outcome_check
    CHECK (outcome IN ('running', 'success', 'failure', 'lease_lost', 'skipped'));

-- +goose Down

DELETE FROM job_runs WHERE outcome = 'skipped';
ALTER TABLE job_runs DROP CONSTRAINT job_runs_outcome_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_outcome_check
    CHECK (outcome IN ('running', 'success', 'failure', 'lease_lost'));
