-- Provisioning's install states (PV-01) reach the node projection (capstan_store::nodes) from
-- its install_state_changed: install_state (NULL is operational; a plan skips the others),
-- install_state_at ordering the changes (an older one heard late is ignored), and a state
-- heard before the node's approval waiting in early_install_states until the approval makes
-- its row.
ALTER TABLE nodes
    ADD COLUMN install_state    TEXT,
    ADD COLUMN install_state_at TIMESTAMPTZ;
CREATE TABLE early_install_states (
    node_id       BIGINT PRIMARY KEY,
    install_state TEXT,
    changed_at    TIMESTAMPTZ NOT NULL
);
