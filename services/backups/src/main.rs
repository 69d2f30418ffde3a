//! `capstan-backups`: the backups service alone, as a container runs it.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    capstan_runtime::main_with("capstan-backups", capstan_backups::run)
}
