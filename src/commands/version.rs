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
    use std::io::Write;
    std::io::stdout()
        .write_all(&completion_script(shell)?)
        .context("writing the completion script")?;
    Ok(ExitCode::SUCCESS)
}

/// The completion script clap_complete generates from the command line's definition, with what
/// it cannot know added: `-p`/`--pid` (of attach and record, before a `--`) completes the pids
/// of running processes, `--profile` the built-in profile names and `.toml` files (bash and
/// zsh; fish completes them as clap_complete writes it: file names).
pub fn completion_script(shell: clap_complete::Shell) -> anyhow::Result<Vec<u8>> {
    let names: Vec<String> = crate::wrappers::ProfileSet::builtin()
        .context("reading the built-in profiles")?
        .profiles()
        .iter()
        .map(|p| p.name.clone())
        .collect();
    let names = names.join(" ");
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "scanprof", &mut out);
    let mut text = String::from_utf8(out).context("the completion script is not UTF-8")?;
    match shell {
        clap_complete::Shell::Bash => {
            // A function of its own that answers for these options and leaves the rest to the
            // generated one; registered after it, so it is the one bash calls.
            text.push_str(&format!(
                r#"
# scanprof: pids for -p/--pid, profile names and .toml files for --profile.
_scanprof_values() {{
    local cur="$2" prev="$3" w
    for w in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        [[ "$w" == "--" ]] && {{ _scanprof "$@"; return; }}
    done
    case "$prev" in
        -p|--pid)
            COMPREPLY=($(compgen -W "$(ps -e -o pid= 2>/dev/null)" -- "$cur"))
            return 0
            ;;
        --profile)
            COMPREPLY=($(compgen -W "{names}" -- "$cur") $(compgen -f -X '!*.toml' -- "$cur") $(compgen -d -- "$cur"))
            return 0
            ;;
    esac
    _scanprof "$@"
}}
complete -F _scanprof_values -o bashdefault -o default scanprof
"#
            ));
        }
        clap_complete::Shell::Zsh => {
            text = text
                .replace(":PID:_default'", ":PID:_pids'")
                .replace(":NAME|FILE:_default'", ":NAME|FILE:_scanprof_profile'");
            let helper = format!(
                "_scanprof_profile() {{\n    _alternative 'profiles:profile:({names})' 'files:profile file:_files -g \"*.toml\"'\n}}\n\n"
            );
            let at = text.find("if [ \"$funcstack[1]\"").unwrap_or(text.len());
            text.insert_str(at, &helper);
        }
        _ => {}
    }
    Ok(text.into_bytes())
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

/// What scanprof's exit status means (every page: each subcommand exits so).
const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "Success."),
    (
        "1",
        "doctor: something scanprof needs is MISSING; lab \\-\\-suite: a verdict named the wrong cause or was more than 10 points off.",
    ),
    (
        "2",
        "An error, said on stderr in one line starting \"scanprof:\"; or a command line clap refused (usage on stderr).",
    ),
    (
        "3",
        "report: lines of the bundle could not be read (each named on stderr); the report covers the rest.",
    ),
    ("130", "sweep: ended by Ctrl\\-C (the table of the steps so far is printed)."),
    (
        "N",
        "run, and record with a command: the command's own exit status, or 128+N when signal N ended it (as time and strace pass it on).",
    ),
];

/// The environment variables scanprof reads.
const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "SCANPROF_DEBUG",
        "When set: libbpf's whole log, and one line per phase of attaching, on stderr (for a bug report).",
    ),
    (
        "SCANPROF_SEND_LOCAL_ONLY",
        "When 1: send sends only to loopback and the lab range 10.99.0.0/24, and refuses any other address.",
    ),
    (
        "SCANPROF_SYSCALL_HOOKS",
        "all or per-call: run, attach and record's --syscall-hooks when the option is not given.",
    ),
    (
        "NO_COLOR",
        "When set and not empty: the live view draws without colour (its lines differ by their markers).",
    ),
    ("PATH", "Where run, record and sweep find the command they start."),
];

/// Escapes text for roff: backslashes, hyphens (so they stay hyphens), and a leading dot or
/// quote (which would be a request).
fn roff_text(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// The EXAMPLES, EXIT STATUS and ENVIRONMENT sections: examples one per line, never filled or
/// wrapped (a pasted example must be whole), the tables as tagged paragraphs.
fn extra_sections(examples: Option<&str>) -> String {
    let mut o = String::new();
    if let Some(ex) = examples {
        o.push_str(".SH EXAMPLES\n.nf\n");
        for line in ex.lines().skip_while(|l| l.trim() == "Examples:") {
            o.push_str(&roff_text(line.trim()));
            o.push('\n');
        }
        o.push_str(".fi\n");
    }
    o.push_str(".SH \"EXIT STATUS\"\n");
    for (code, what) in EXIT_STATUS {
        o.push_str(&format!(".TP\n\\fB{code}\\fR\n{what}\n"));
    }
    o.push_str(".SH ENVIRONMENT\n");
    for (var, what) in ENVIRONMENT {
        o.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff_text(var), roff_text(what)));
    }
    o
}

/// The roff page of scanprof, or of one of its subcommands (named `scanprof-SUB`). No `help`
/// subcommand is listed (it has no page: `scanprof help SUB` is `scanprof SUB --help`); the
/// examples are an EXAMPLES section of whole lines, then EXIT STATUS and ENVIRONMENT.
pub fn man_page(subcommand: Option<&str>) -> anyhow::Result<Vec<u8>> {
    let top = Cli::command().disable_help_subcommand(true);
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
    let examples = cmd.get_after_help().map(|h| h.to_string());
    let cmd = cmd.after_help(None::<&str>);
    let man = clap_mangen::Man::new(cmd);
    let mut out = Vec::new();
    let render = |out: &mut Vec<u8>| -> std::io::Result<()> {
        man.render_title(out)?;
        man.render_name_section(out)?;
        man.render_synopsis_section(out)?;
        man.render_description_section(out)?;
        man.render_options_section(out)?;
        if subcommand.is_none() {
            man.render_subcommands_section(out)?;
        }
        out.extend_from_slice(extra_sections(examples.as_deref()).as_bytes());
        // The version is scanprof's, on its own page.
        if subcommand.is_none() {
            man.render_version_section(out)?;
        }
        Ok(())
    };
    render(&mut out).context("rendering the manual page")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

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
        assert!(attach.contains(".SH EXAMPLES"), "{attach}");
        assert!(man_page(Some("nosuch"))
            .unwrap_err()
            .to_string()
            .contains("one of attach"));
    }

    /// The top page lists only subcommands that have a page (no `scanprof-help(1)`, which
    /// `man help` could not show), and every page has EXAMPLES (whole lines, unfilled), EXIT
    /// STATUS and ENVIRONMENT.
    #[test]
    fn man_pages_list_only_real_pages_and_say_exit_status_and_environment() {
        let page = String::from_utf8(man_page(None).unwrap()).unwrap();
        let listed: Vec<&str> = page
            .lines()
            .filter_map(|l| l.strip_prefix("scanprof\\-"))
            .filter_map(|l| l.strip_suffix("(1)"))
            .collect();
        assert!(listed.len() >= 14, "{listed:?}");
        assert!(!listed.contains(&"help"), "{page}");
        for name in &listed {
            let name = name.replace("\\-", "-");
            man_page(Some(&name)).unwrap_or_else(|e| panic!("scanprof-{name}(1) is listed but: {e}"));
        }
        for s in Cli::command().get_subcommands().filter(|c| !c.is_hide_set()) {
            let name = s.get_name();
            let sub = String::from_utf8(man_page(Some(name)).unwrap()).unwrap();
            for section in [
                ".SH EXAMPLES\n.nf\n",
                ".SH \"EXIT STATUS\"",
                ".SH ENVIRONMENT",
                "SCANPROF_DEBUG",
            ] {
                assert!(sub.contains(section), "scanprof-{name} lacks {section}: {sub}");
            }
            assert!(!sub.contains(".SH EXTRA"), "{sub}");
            let examples = s.get_after_help().unwrap().to_string();
            for line in examples.lines().skip(1) {
                let want = format!("\n{}\n", roff_text(line.trim()));
                assert!(
                    sub.contains(&want),
                    "scanprof-{name}: example not on one line: {line}\n{sub}"
                );
            }
        }
        assert!(
            page.contains(".SH \"EXIT STATUS\"") && page.contains("\\fB3\\fR"),
            "{page}"
        );
    }

    /// Every variable the code reads (outside tests) is in ENVIRONMENT.
    #[test]
    fn the_environment_section_names_every_variable_read() {
        // Read only by tests: not the user's.
        const TEST_ONLY: [&str; 2] = ["UPDATE_SNAPSHOTS", "SCANPROF_KEEP_PLOTS"];
        fn walk(dir: &std::path::Path, found: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, found);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    for pat in ["env::var_os(\"", "env::var(\""] {
                        for (i, _) in text.match_indices(pat) {
                            let rest = &text[i + pat.len()..];
                            found.push(rest[..rest.find('"').unwrap()].to_string());
                        }
                    }
                }
            }
        }
        let mut found = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
        assert!(found.iter().any(|v| v == "SCANPROF_DEBUG"), "{found:?}");
        for v in found.iter().filter(|v| !TEST_ONLY.contains(&v.as_str())) {
            assert!(
                ENVIRONMENT.iter().any(|(n, _)| n == v),
                "{v} is read but not in ENVIRONMENT"
            );
        }
    }

    /// bash, for real: `-p` completes running pids (this test's own among them), `--profile`
    /// the built-in profile names; after `--` the words are the command's, not pids.
    #[test]
    fn bash_completes_pids_and_profile_names() {
        let script = String::from_utf8(completion_script(clap_complete::Shell::Bash).unwrap()).unwrap();
        let dir = std::env::temp_dir().join(format!("scanprof-completion-{}", std::process::id()));
        // Removed however the test ends.
        struct Cleanup(std::path::PathBuf);
        impl Drop for Cleanup {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let _cleanup = Cleanup(dir.clone());
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("scanprof.bash");
        std::fs::write(&file, &script).unwrap();
        let complete = |words: &[&str]| -> Vec<String> {
            let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
            let body = format!(
                "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; _scanprof_values scanprof '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                file.display(),
                quoted.join(" "),
                words.len() - 1,
                words[words.len() - 1],
                words[words.len() - 2],
            );
            let out = std::process::Command::new("bash")
                .args(["--norc", "--noprofile", "-c", &body])
                .current_dir(&dir)
                .output()
                .expect("bash");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        };
        let me = std::process::id().to_string();
        let pids = complete(&["scanprof", "attach", "-p", ""]);
        assert!(pids.contains(&me), "{pids:?}");
        assert!(complete(&["scanprof", "record", "--pid", ""]).contains(&me));
        assert_eq!(complete(&["scanprof", "run", "--profile", "zm"]), ["zmap"]);
        let all = complete(&["scanprof", "attach", "--profile", ""]);
        for name in ["masscan", "zmap", "nmap", "generic"] {
            assert!(all.iter().any(|w| w == name), "{all:?}");
        }
        assert!(!complete(&["scanprof", "run", "--", "masscan", "-p", ""]).contains(&me));
        let zsh = String::from_utf8(completion_script(clap_complete::Shell::Zsh).unwrap()).unwrap();
        assert!(
            zsh.contains(":PID:_pids'") && !zsh.contains(":PID:_default'"),
            "{zsh}"
        );
        assert!(zsh.contains(":NAME|FILE:_scanprof_profile'") && zsh.contains("_scanprof_profile() {"));
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
