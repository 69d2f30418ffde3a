-- An advance reads its rollout's current stage and the steps in flight in any stage, not every
-- step (issue 16's benchmark: each of a 100-node stage's results read all 1,000 steps and their
-- answers under the rollout's lock). `rollout_steps_of (rollout_id, stage)` finds the stage;
-- this finds the few steps in flight (also the tick's look for applies under way); and a step's
-- answers are found by the step.
CREATE INDEX rollout_steps_in_flight ON rollout_steps (rollout_id)
    WHERE phase NOT IN ('waiting', 'done');

CREATE INDEX rollout_jobs_of_step ON rollout_jobs (step_id);
