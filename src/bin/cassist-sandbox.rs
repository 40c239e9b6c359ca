//! `cassist-sandbox`: the sandbox wrapper of `cassist_sandbox::sandbox` as a
//! program of its own, installed beside `cassist`. cassist starts it for
//! every command of a task (`cassist-sandbox __sandbox-exec ARGS`, the
//! arguments `cassist __sandbox-exec` takes); being small, it maps,
//! relocates and exits in a fraction of the time cassist's own image
//! takes. cassist uses it only when it answers `--build-id` with cassist's
//! own build ([`cassist_sandbox::sandbox::build_id`]).

use std::io::Write;

fn main() {
    let mut args = std::env::args_os().skip(1).peekable();
    match args.peek().and_then(|a| a.to_str()) {
        Some("--build-id") => {
            let _ = writeln!(std::io::stdout(), "{}", cassist_sandbox::sandbox::build_id());
        }
        Some(cassist_sandbox::sandbox::WRAPPER_COMMAND) => {
            args.next();
            cassist_sandbox::sandbox::main(args)
        }
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "cassist-sandbox: cassist starts this program for the commands of its tasks; it is not run by hand"
            );
            std::process::exit(2);
        }
    }
}
