//! `capstan-provisioning`: the provisioning service alone, as a container runs it.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    capstan_runtime::main("capstan-provisioning", capstan_provisioning::run)
}
