-- Nodes the provisioning service makes before their agent exists (register_node), and the
-- install state it tells of each (PV-01, its install_state_changed).
ALTER TABLE nodes
    -- The asker's name for what the node was made for (`provision:42`): asking again with it
    -- answers the same node. NULL for nodes made by a join's approval.
    ADD COLUMN reference        TEXT UNIQUE,
    -- NULL is operational; the others are provisioning's words (InstallState).
    ADD COLUMN install_state    TEXT CHECK (install_state IN
                                    ('installing', 'install_failed', 'copy', 'switching', 'retired')),
    -- When the install state applied was changed; an older change heard late is ignored.
    ADD COLUMN install_state_at TIMESTAMPTZ;
