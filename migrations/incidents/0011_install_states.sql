-- Provisioning's install states (PV-01) reach the node projection (capstan_store::nodes) from
-- its install_state_changed: install_state, kept here already and read by this service's
-- non-operational skips, is now written by the kit; install_state_at orders the changes (an
-- older one heard late is ignored), and a state heard before the node's approval waits in
-- early_install_states until the approval makes its row.
ALTER TABLE nodes ADD COLUMN install_state_at TIMESTAMPTZ;
CREATE TABLE early_install_states (
    node_id       BIGINT PRIMARY KEY,
    install_state TEXT,
    changed_at    TIMESTAMPTZ NOT NULL
);
