//! The `provender` binary: everything happens in [`provender::cli`].

fn main() -> std::process::ExitCode {
    provender::cli::main()
}
