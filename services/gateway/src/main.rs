//! `capstan-gateway`: the gateway alone, as a container runs it.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    capstan_runtime::main_with("capstan-gateway", capstan_gateway::run)
}
