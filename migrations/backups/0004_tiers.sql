-- Retention tiers beyond the spec (what restic and Borg users expect): the newest chain of each
-- of the N most recent days, ISO weeks and months stays, on top of the window (BK-10..BK-13's
-- safety rules still hold: the tiers only ever keep more). 0 = no tier.

ALTER TABLE fleet_policy
    ADD COLUMN keep_daily   INTEGER NOT NULL DEFAULT 0 CHECK (keep_daily BETWEEN 0 AND 3650),
    ADD COLUMN keep_weekly  INTEGER NOT NULL DEFAULT 0 CHECK (keep_weekly BETWEEN 0 AND 520),
    ADD COLUMN keep_monthly INTEGER NOT NULL DEFAULT 0 CHECK (keep_monthly BETWEEN 0 AND 120);

-- A node's own schedule freezes the tiers with the rest of its field set; `off` stores none.
ALTER TABLE node_policies
    ADD COLUMN keep_daily   INTEGER CHECK (keep_daily BETWEEN 0 AND 3650),
    ADD COLUMN keep_weekly  INTEGER CHECK (keep_weekly BETWEEN 0 AND 520),
    ADD COLUMN keep_monthly INTEGER CHECK (keep_monthly BETWEEN 0 AND 120);
UPDATE node_policies SET keep_daily = 0, keep_weekly = 0, keep_monthly = 0
    WHERE position = 'own';
ALTER TABLE node_policies ADD CONSTRAINT node_policies_tiers_with_own CHECK (
    (position = 'own') = (keep_daily IS NOT NULL AND keep_weekly IS NOT NULL
        AND keep_monthly IS NOT NULL)
    AND (position = 'own' OR (keep_daily IS NULL AND keep_weekly IS NULL
        AND keep_monthly IS NULL)));
