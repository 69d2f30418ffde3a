//! `capstan-incidents`: the incidents service alone, as a container runs it.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    capstan_runtime::main_with("capstan-incidents", capstan_incidents::run)
}
