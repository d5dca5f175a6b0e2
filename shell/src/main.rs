//! The `gsh` binary: everything lives in the library; see `cli::main`.

fn main() {
    std::process::exit(gsh::cli::main());
}
