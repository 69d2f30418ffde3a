//! `capstan-dns`: the dns service alone, as a container runs it.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    capstan_runtime::main("capstan-dns", capstan_dns::run)
}
