//! `capstan-billing`: the billing service alone, as a container runs it.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    capstan_runtime::main("capstan-billing", capstan_billing::run)
}
