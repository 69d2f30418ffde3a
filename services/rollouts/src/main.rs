//! `capstan-rollouts`: the rollouts service alone, as a container runs it.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    capstan_runtime::main("capstan-rollouts", capstan_rollouts::run)
}
