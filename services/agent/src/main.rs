//! `capstan-agent`: the node agent's binary.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    capstan_agent::cli::main()
}
