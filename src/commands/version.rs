//! The command line's own conventions: `--version` with the BPF objects and kernel features,
//! `scanprof completions SHELL` (clap_complete) and `scanprof man [SUBCOMMAND]` (clap_mangen),
//! all generated from the one clap definition in src/cli.rs.

use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches};

use crate::cli::Cli;

/// Parses the command line; `--version` prints [`long_version`], `-V` the version alone.
pub fn parse() -> Cli {
    let mut cmd = Cli::command();
    // Reading the kernel's BTF takes a few ms: only when the long version is asked for.
    // args_os: a non-UTF-8 argument (a legal file name, a scanner's argument) is clap's to
    // judge, not a panic here.
    if std::env::args_os().skip(1).any(|a| a == "--version") {
        cmd = cmd.long_version(long_version());
    }
    let matches = cmd.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// The version, the BPF objects built into this binary (size and SHA-256 prefix: what a bug
/// report needs to know which probes ran) and what this kernel offers them.
pub fn long_version() -> String {
    use std::fmt::Write as _;
    let mut o = String::from(env!("CARGO_PKG_VERSION"));
    let _ = write!(o, "\nBPF objects:");
    for (name, bytes) in crate::probes::objects() {
        let _ = write!(
            o,
            "\n  {name:<10} {:>7} bytes  sha256 {}",
            bytes.len(),
            sha256_prefix(bytes)
        );
    }
    let k = crate::probes::KernelFeatures::detect();
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into());
    let yes = |b: bool| if b { "yes" } else { "no" };
    let _ = write!(
        o,
        "\nkernel {release}: BTF {}; kfree_skb drop reasons {}, receiving socket {}; {} of {} tracepoints",
        yes(k.btf),
        yes(k.kfree_skb_reason),
        yes(k.kfree_skb_rx_sk),
        k.tracepoints.len(),
        crate::probes::TRACEPOINTS.len()
    );
    let _ = write!(
        o,
        "\n(`scanprof doctor` checks that each probe loads and attaches)"
    );
    o
}

fn sha256_prefix(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `scanprof completions SHELL`: the completion script on stdout.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "scanprof", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// `scanprof man [SUBCOMMAND]`: the manual page on stdout.
pub fn man(subcommand: Option<&str>) -> anyhow::Result<ExitCode> {
    let page = man_page(subcommand)?;
    use std::io::Write;
    std::io::stdout()
        .write_all(&page)
        .context("writing the manual page")?;
    Ok(ExitCode::SUCCESS)
}

/// The roff page of scanprof, or of one of its subcommands (named `scanprof-SUB`).
pub fn man_page(subcommand: Option<&str>) -> anyhow::Result<Vec<u8>> {
    let top = Cli::command();
    let cmd = match subcommand {
        None => top,
        Some(name) => {
            let names: Vec<String> = top.get_subcommands().map(|c| c.get_name().to_string()).collect();
            let sub = top
                .find_subcommand(name)
                .with_context(|| format!("no subcommand {name}: one of {}", names.join(", ")))?
                .clone();
            // The page is scanprof-SUB(1), as git and cargo name theirs.
            let full = format!("scanprof-{name}");
            sub.name(full.clone()).bin_name(full)
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .context("rendering the manual page")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Every example line of every subcommand's --help parses as a scanprof command line.
    #[test]
    fn every_help_example_parses() {
        let top = Cli::command();
        let mut n = 0;
        for sub in top.get_subcommands().filter(|s| !s.is_hide_set()) {
            let help = sub
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_else(|| panic!("{} --help has no examples", sub.get_name()));
            assert!(help.starts_with("Examples:\n"), "{help}");
            for line in help.lines().skip(1) {
                let line = line.trim();
                // A comment may follow the command after two or more spaces; shell
                // redirections are not arguments.
                let command = line.split("   ").next().unwrap_or(line);
                let command = command.split(" > ").next().unwrap_or(command);
                let command = command.split(" | ").next().unwrap_or(command);
                let words: Vec<&str> = command.split_whitespace().collect();
                assert_eq!(words.first(), Some(&"scanprof"), "{line}");
                Cli::try_parse_from(&words).unwrap_or_else(|e| panic!("{line}: {e}"));
                n += 1;
            }
        }
        assert!(n >= 20, "{n} examples");
    }

    #[test]
    fn short_flags_mean_their_long_ones() {
        let cli = Cli::try_parse_from([
            "scanprof", "run", "-d", "5", "-i", "0.5", "-o", "b", "-q", "--", "true",
        ])
        .unwrap();
        let crate::cli::Command::Run { run, .. } = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.duration, Some(5.0));
        assert_eq!(run.interval, 0.5);
        assert_eq!(run.export.as_deref(), Some(std::path::Path::new("b")));
        assert!(run.quiet);
        // record's -o is the same flag, and it is required at run time.
        let cli = Cli::try_parse_from(["scanprof", "record", "-o", "dir", "-p", "1"]).unwrap();
        let crate::cli::Command::Record { run, .. } = cli.command else {
            panic!("not record")
        };
        assert_eq!(run.export.as_deref(), Some(std::path::Path::new("dir")));
        assert!(Cli::try_parse_from(["scanprof", "record", "--output", "dir", "-p", "1"]).is_ok());
    }

    #[test]
    fn completions_and_man_pages_cover_every_subcommand() {
        let top = Cli::command();
        let subs: Vec<String> = top
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(|c| c.get_name().to_string())
            .filter(|n| n != "help")
            .collect();
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut cmd = Cli::command();
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cmd, "scanprof", &mut out);
            let text = String::from_utf8(out).unwrap();
            for s in &subs {
                assert!(text.contains(s.as_str()), "{shell:?} completion lacks {s}");
            }
            assert!(text.contains("metrics-file"), "{shell:?}");
        }
        let page = String::from_utf8(man_page(None).unwrap()).unwrap();
        assert!(page.contains(".TH scanprof"), "{page}");
        for s in &subs {
            // roff escapes a hyphen in a name (`ring\-recv`).
            let roff = s.replace('-', "\\-");
            assert!(
                page.contains(s.as_str()) || page.contains(&roff),
                "man page lacks {s}"
            );
            let sub = String::from_utf8(man_page(Some(s)).unwrap()).unwrap();
            assert!(
                sub.contains(&format!(".TH scanprof-{s}")) || sub.contains(&format!(".TH scanprof\\-{roff}")),
                "{sub}"
            );
        }
        let attach = String::from_utf8(man_page(Some("attach")).unwrap()).unwrap();
        assert!(attach.contains("Examples:"), "{attach}");
        assert!(man_page(Some("nosuch"))
            .unwrap_err()
            .to_string()
            .contains("one of attach"));
    }

    #[test]
    fn the_long_version_names_every_bpf_object_and_the_kernel() {
        let v = long_version();
        assert!(v.starts_with(env!("CARGO_PKG_VERSION")), "{v}");
        for (name, bytes) in crate::probes::objects() {
            assert!(v.contains(&format!("{name} ")), "{v}");
            assert!(v.contains(&format!("{} bytes", bytes.len())), "{v}");
        }
        assert!(v.contains("\nkernel "), "{v}");
    }
}
