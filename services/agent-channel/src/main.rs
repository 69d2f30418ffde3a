//! `capstan-agent-channel`: the agent-channel service alone, as a container runs it.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    capstan_runtime::main_with("capstan-agent-channel", capstan_agent_channel::run)
}
