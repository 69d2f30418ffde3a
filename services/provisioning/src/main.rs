//! `capstan-provisioning`: the provisioning service alone, as a container runs it.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    capstan_runtime::main_with("capstan-provisioning", capstan_provisioning::run)
}
