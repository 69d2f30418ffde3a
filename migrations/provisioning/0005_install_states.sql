-- The node projection's install state columns (capstan_store::nodes, PV-01): the kit's writes
-- touch them on every node_approved (a state heard before the approval waits in
-- early_install_states), so every schema holding the kit's table has them. This service owns
-- install states and does not hear its own install_state_changed: its rows stay NULL here.
-- (0004 added install_state already: IF NOT EXISTS.)
ALTER TABLE nodes
    ADD COLUMN IF NOT EXISTS install_state    TEXT,
    ADD COLUMN install_state_at TIMESTAMPTZ;
CREATE TABLE early_install_states (
    node_id       BIGINT PRIMARY KEY,
    install_state TEXT,
    changed_at    TIMESTAMPTZ NOT NULL
);
