//! Test-only: every example a user may paste, from each subcommand's `--help`, README.md and the
//! shell blocks of docs/*.md, split as the shell splits it, parsed by the real clap parser, set
//! up as a run would be where that needs no root (profile and `--per-packet` names), and the
//! unprivileged read-only ones (`report`, `compare`, `man`, `completions`) run on fixture bundles.

use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command};
use crate::run::Output;
use crate::session::Target;

/// One example: where it was found, and its text.
struct Example {
    origin: String,
    line: String,
}

/// The words the shell would pass to the command in `line`: quotes and backslashes as the shell
/// reads them; a word starting with `#` begins a comment; an unquoted `>`, `<`, `|`, `;` or `&`
/// ends the command (a redirection or the next command). `Err` names what cannot be pasted.
fn shell_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '#' if !in_word => return Ok(words),
            '>' | '<' | '|' | ';' | '&' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                }
                return Ok(words);
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => word.extend(chars.next()),
                        Some(c) => word.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// The examples of every subcommand's `--help` (the lines after "Examples:").
fn help_examples() -> Vec<Example> {
    let top = Cli::command();
    let mut out = Vec::new();
    for sub in top.get_subcommands().filter(|s| !s.is_hide_set()) {
        let help = sub
            .get_after_help()
            .map(|h| h.to_string())
            .unwrap_or_else(|| panic!("{} --help has no examples", sub.get_name()));
        assert!(help.starts_with("Examples:\n"), "{help}");
        for line in help.lines().skip(1) {
            out.push(Example {
                origin: format!("scanprof {} --help", sub.get_name()),
                line: line.trim().to_string(),
            });
        }
    }
    out
}

/// The scanprof command lines in the shell blocks (```sh, bash, shell, console) of a markdown
/// file; a line ending in `\` goes on on the next; a `$ ` prompt and `sudo` are the shell's.
fn markdown_examples(path: &Path) -> Vec<Example> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut shell = None::<bool>;
    let mut pending = String::new();
    for (i, raw) in text.lines().enumerate() {
        if let Some(lang) = raw.trim_start().strip_prefix("```") {
            shell = match shell {
                Some(_) => None,
                None => Some(matches!(lang.trim(), "sh" | "bash" | "shell" | "console")),
            };
            continue;
        }
        if shell != Some(true) {
            continue;
        }
        let line = raw.trim();
        let line = line.strip_prefix("$ ").unwrap_or(line);
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        let whole = std::mem::take(&mut pending) + line;
        let bare = whole.strip_prefix("sudo ").unwrap_or(&whole);
        if bare.starts_with("scanprof ") {
            out.push(Example {
                origin: format!("{}:{}", path.display(), i + 1),
                line: bare.to_string(),
            });
        }
    }
    out
}

/// Every example: --help, README.md, docs/*.md.
fn all_examples() -> Vec<Example> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = help_examples();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    for d in &docs {
        out.extend(markdown_examples(d));
    }
    out
}

/// The command part of an example (before a `#` comment), as typed.
fn command_part(line: &str) -> &str {
    line.split(" #").next().unwrap_or(line).trim_end()
}

/// What is wrong with one example, if anything: it must split, parse, and (a run or record of a
/// command) pass the run's own setup; prose after it must follow a `#`.
fn check(ex: &Example) -> Result<Cli, String> {
    // Two spaces inside the command are where prose was put without a `#`: pasted, it becomes
    // arguments (after `--`, the scanner's).
    if command_part(&ex.line).contains("  ") {
        return Err("text after the command without a `#` (a shell would pass it on as arguments)".into());
    }
    let words = shell_words(&ex.line)?;
    let cli = Cli::try_parse_from(&words).map_err(|e| e.to_string())?;
    let run_command = match &cli.command {
        Command::Run { run, command } => Some((run, command.clone())),
        Command::Record { run, command, .. } if !command.is_empty() => Some((run, command.clone())),
        _ => None,
    };
    if let Some((run, command)) = run_command {
        crate::run::session_config(Target::Command(command), run, Output::Text)
            .map_err(|e| format!("{e:#}"))?;
    }
    Ok(cli)
}

#[test]
fn shell_words_split_as_the_shell_does() {
    let w = |s: &str| shell_words(s).unwrap();
    assert_eq!(
        w("scanprof a  'b c' \"d\\\"e\" f\\ g"),
        ["scanprof", "a", "b c", "d\"e", "f g"]
    );
    assert_eq!(w("scanprof man attach | man -l -"), ["scanprof", "man", "attach"]);
    assert_eq!(
        w("scanprof completions bash > /etc/x"),
        ["scanprof", "completions", "bash"]
    );
    assert_eq!(w("scanprof lab   # the healthy lab"), ["scanprof", "lab"]);
    assert_eq!(w("scanprof run -- a#b"), ["scanprof", "run", "--", "a#b"]);
    assert!(shell_words("scanprof 'open").is_err());
}

/// The faults this test exists for are caught: prose without `#`, a per-packet probe the
/// profile does not have, a flag a subcommand does not take.
#[test]
fn a_broken_example_is_caught() {
    let bad = |line: &str| {
        check(&Example {
            origin: "test".into(),
            line: line.into(),
        })
        .err()
        .unwrap_or_else(|| panic!("{line} passed"))
    };
    assert!(bad("scanprof lab    the healthy lab").contains("without a `#`"));
    assert!(
        bad("scanprof run --profile zmap --per-packet send -- zmap -r 100 10.1.0.0/24")
            .contains("no per-packet probe")
    );
    assert!(bad("scanprof lab --nosuch").contains("--nosuch"));
}

/// Every example in --help, README.md and docs/*.md parses and sets up; the read-only ones run,
/// on fixture bundles, and succeed.
#[test]
fn every_example_parses_and_the_unprivileged_ones_run() {
    let examples = all_examples();
    let failures: Vec<String> = examples
        .iter()
        .filter_map(|ex| {
            check(ex)
                .err()
                .map(|e| format!("{}: `{}`: {e}", ex.origin, ex.line))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} examples fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(examples.len() >= 60, "{} examples", examples.len());

    // Every bundle an example names, as a fixture (a run's bundle: compare takes two of them).
    let tmp = std::env::temp_dir().join(format!("scanprof-examples-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    struct Cleanup(PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(tmp.clone());
    let fixture = |name: &Path| -> PathBuf {
        let dir = tmp.join(name.components().next().expect("a path"));
        if !dir.exists() {
            let b = crate::views::export::bundle::BundleDir::open(&dir, false).expect("fixture dir");
            crate::views::export::bundle::write(
                &b,
                &crate::views::fixtures::rich_recording(),
                &crate::views::export::bundle::Extras::default(),
            )
            .expect("fixture bundle");
        }
        tmp.join(name)
    };
    let mut ran = 0;
    for ex in &examples {
        let mut cli = check(ex).expect("checked above");
        match &mut cli.command {
            Command::Report { path, .. } => *path = fixture(path),
            Command::Compare { a, b, .. } => {
                *a = fixture(a);
                *b = fixture(b);
            }
            Command::Man { subcommand } => {
                crate::commands::version::man_page(subcommand.as_deref())
                    .unwrap_or_else(|e| panic!("{}: `{}`: {e:#}", ex.origin, ex.line));
                ran += 1;
                continue;
            }
            Command::Completions { shell } => {
                // What `completions` writes, into a buffer rather than the test's stdout.
                let out = crate::commands::version::completion_script(*shell)
                    .unwrap_or_else(|e| panic!("{}: `{}`: {e:#}", ex.origin, ex.line));
                assert!(!out.is_empty(), "{}", ex.line);
                ran += 1;
                continue;
            }
            _ => continue,
        }
        let code = super::dispatch(&cli).unwrap_or_else(|e| panic!("{}: `{}`: {e:#}", ex.origin, ex.line));
        assert_eq!(
            code,
            std::process::ExitCode::SUCCESS,
            "{}: `{}`",
            ex.origin,
            ex.line
        );
        ran += 1;
    }
    assert!(ran >= 10, "{ran} examples run");
}
