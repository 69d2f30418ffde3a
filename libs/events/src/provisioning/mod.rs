//! The provisioning service's contract (issue 29): the words a provision is spoken in (cloud
//! providers, account flags, install kinds, install states, provision steps) shared by the
//! service, the gateway and every service that skips non-operational nodes (PV-01); its public
//! events; and the rpc questions the gateway asks it (accounts and their offer).

mod events;
pub mod machines;
pub mod provisions;
pub mod rpc;

pub use events::*;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Declares a closed word of this module: serde and strum spell it the same (snake_case, or
/// the case given first).
macro_rules! word {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        word! { "snake_case"; $(#[$meta])* pub enum $name { $($(#[$vmeta])* $variant),+ } }
    };
    ($case:literal; $(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema,
            strum::IntoStaticStr, strum::AsRefStr, strum::EnumIter, strum::Display,
            strum::EnumString,
        )]
        #[serde(rename_all = $case)]
        #[strum(serialize_all = $case)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }
    };
}

word! {
    /// A cloud provider with a driver here (PV-57).
    pub enum CloudProvider {
        /// Linode (Akamai) API v4.
        Linode,
        /// Hetzner Cloud API v1.
        Hetzner,
    }
}

word! {
    /// Which of our accounts a box belongs to (PV-12): `main`, or `test` (the test cloud, the
    /// only place PV-55's cleanup may delete anything).
    pub enum AccountFlag {
        Main,
        Test,
    }
}

word! { "kebab-case";
    /// What a provision installs (issue 29): an agent alone (siteless), a site laid out for site
    /// releases, or a Docker host (a host agent named `<name>-host` and a placement record).
    pub enum InstallKind {
        Agent,
        Site,
        DockerHost,
    }
}

word! {
    /// A node's install state (PV-01). Travels as `Option<InstallState>`: `None` (NULL) is
    /// operational; each of these is not.
    pub enum InstallState {
        /// Being installed: installing → NULL on success, `install_failed` on failure.
        Installing,
        /// The install failed; the node shows Retry (PV-02).
        InstallFailed,
        /// A dormant copy of another node's site.
        Copy,
        /// The source of a switch-over in progress.
        Switching,
        /// The old machine after a switch-over.
        Retired,
    }
}

word! {
    /// Where a provision stands (PV-03, PV-05): requested → creating (the provider is asked)
    /// → booting (waiting for it to report the instance running) → installing (the SSH
    /// bootstrap) → done; any step may end `install_failed`, from which Retry starts again.
    pub enum ProvisionStep {
        Requested,
        Creating,
        Booting,
        Installing,
        Done,
        InstallFailed,
    }
}
