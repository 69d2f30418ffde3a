//! `capstan-monitor`: the monitor service alone, as a container runs it.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    capstan_runtime::main_with("capstan-monitor", capstan_monitor::run)
}
