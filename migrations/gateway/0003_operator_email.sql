-- Where an operator's mail goes (incident signals); set with `capstan admin create-operator
-- --email` or on the Account page. Changes are told to the plane as operator_changed events.
ALTER TABLE operators ADD COLUMN email TEXT CHECK (email IS NULL OR length(email) <= 254);
