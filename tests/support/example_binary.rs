//! An example's binary for the tests that run it as a child process
//! (`cargo test` builds examples with the tests), refused when it is
//! missing or older than one of its sources.

use std::path::{Path, PathBuf};

/// Example `name`'s binary beside this test's executable
/// (`target/<profile>/examples/`), which `cargo test` builds with the
/// tests: missing, or older than one of its sources, the test fails
/// rather than check nothing or an old build of the code under test
/// (`cargo test --test <one>` builds no examples). `features` are the
/// ones its build needs, for the command the failure suggests.
pub fn example_binary(name: &str, features: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let binary = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let build = format!("cargo build --features {features} --example {name}");
    assert!(
        binary.exists(),
        "{} is built by `cargo test` (or `{build}`)",
        binary.display()
    );
    if let Some(newer) = newer_source(&binary) {
        panic!(
            "{} is older than {}: a single test target builds no examples; \
             run `{build}` (or the whole `cargo test`)",
            binary.display(),
            newer.display()
        );
    }
    binary
}

/// A source file `binary` was built from that changed after it was built,
/// read from the dep-info file Cargo writes beside it (`<name>.d`:
/// `<binary>: <source> <source> …`, spaces in paths escaped with `\`),
/// which lists exactly the files the build used.
fn newer_source(binary: &Path) -> Option<PathBuf> {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified());
    let built = modified(binary).expect("the binary's modification time");
    let dep_info = binary.with_extension("d");
    let text = std::fs::read_to_string(&dep_info).unwrap_or_else(|e| {
        panic!(
            "{} (Cargo writes it with the binary): {e}",
            dep_info.display()
        )
    });
    let first = text.lines().next().unwrap_or_default();
    // The target ends at the first ": " (a Windows drive's colon is
    // followed by a backslash).
    let (_, sources) = first
        .split_once(": ")
        .unwrap_or_else(|| panic!("{}: no `target: sources` line", dep_info.display()));
    let mut paths = Vec::new();
    let mut path = String::new();
    let mut chars = sources.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => path.push(chars.next().unwrap()),
            ' ' => paths.push(std::mem::take(&mut path)),
            c => path.push(c),
        }
    }
    paths.push(path);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    paths
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(|p| root.join(p))
        .find(|p| modified(p).is_ok_and(|m| m > built))
}
