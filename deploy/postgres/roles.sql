-- Production roles for Capstan: one login role per service, each owning its own schema and
-- nothing else, so no service can read or write another's tables (ARCHITECTURE.md, "Data
-- ownership").
--
-- Run it as a superuser (or a role with CREATEROLE that may create schemas) against the
-- plane's database, once per cluster; running it again changes nothing:
--
--   psql -v ON_ERROR_STOP=1 -h DBHOST -U postgres -d capstan -f deploy/postgres/roles.sql
--
-- Passwords are not set here and never belong in this file: set each one out of band, e.g. in
-- psql `\password capstan_gateway`, then hand it to that service alone as its
-- CAPSTAN__DATABASE__URL (or CAPSTAN__DATABASE__URL_FILE), e.g.
-- postgres://capstan_gateway:...@DBHOST/capstan.
--
-- With one role per service, every service migrates its own schema when it starts (under an
-- advisory lock, so replicas may start together). Do not run `capstan migrate` with a
-- superuser's URL against this layout: the tables it created would belong to that superuser
-- instead of the service's role.

-- Nobody gets anything in `public` by default; Capstan keeps nothing there.
REVOKE ALL ON SCHEMA public FROM PUBLIC;

DO $roles$
DECLARE
    schema_name text;
    role_name text;
BEGIN
    FOREACH schema_name IN ARRAY ARRAY[
        'gateway', 'agent_channel', 'incidents', 'monitor', 'backups',
        'rollouts', 'provisioning', 'dns', 'billing'
    ] LOOP
        role_name := 'capstan_' || schema_name;

        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
            -- No password: set one out of band (\password). Until then the role cannot log in
            -- over password authentication.
            EXECUTE format(
                'CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION',
                role_name);
            RAISE NOTICE 'created role %', role_name;
        END IF;

        EXECUTE format('CREATE SCHEMA IF NOT EXISTS %I AUTHORIZATION %I', schema_name, role_name);
        -- A schema made earlier by someone else (a first start under a shared role) changes
        -- owner here; tables already inside it keep theirs (reassign them with ALTER TABLE).
        EXECUTE format('ALTER SCHEMA %I OWNER TO %I', schema_name, role_name);

        -- The schema exists now, so a service only checks for it at start and needs no CREATE
        -- right on the database: connecting is all it may do outside its own schema.
        EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), role_name);
    END LOOP;
END
$roles$;
