//! The `harp` binary: everything is in the library (`lib.rs`), shared with the JNI library.

fn main() -> std::process::ExitCode {
    harp_cli::main()
}
