//! Scanner profiles: declarative per-scanner facts (`wrappers/<scanner>.toml`) that tell the rest
//! of scanprof how to recognise a scanner's processes and threads, what rate it was asked for,
//! and which functions to uprobe. Pure data and parsing: `src/probes` attaches what `[[probe]]`
//! lists, `src/analysis` compares the achieved rate with `requested_rate`. See docs/wrappers.md.

mod argv;
mod exec;
mod pacer;
mod profile;
mod rate;
mod status;

pub use exec::{Image, ScannerChoice, ScannerProcess};
pub use pacer::{PacerKind, UnknownPacer};
pub use profile::{
    ArgType, BufferField, DelayUnit, FieldCondition, OutputClaim, PacerWait, Probe, ProbeArg, ProbeBuffer,
    ProbeRead, ProbeRole, ProcessRule, ProfileError, RateKind, RateModel, RateMultiplier, RateOption,
    RateRules, RateUnit, RateWindow, Recipient, ScannerProfile, ThreadPick, ThreadRule, ValueForm,
    WindowOption, GENERIC_PROFILE, SCHEMA_VERSION,
};
pub use rate::{requested_rate, RateOrigin, RequestedRate, WindowRead, WorkUnitRate};
pub use status::{
    OutputStream, StatusField, StatusFigure, StatusFormat, StatusLocation, StatusParser, StatusRule,
};

/// The profiles shipped with scanprof: (file name, text) of every `wrappers/*.toml`, sorted by file
/// name, listed by build.rs (so adding a scanner is adding its file). Order among them does not
/// matter: no two claim the same executable or comm (a unit test checks), and `ProfileSet::new`
/// moves the fallback (`generic`) last.
const BUILTIN: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/builtin_profiles.rs"));

/// Length the kernel keeps of a task's comm (TASK_COMM_LEN - 1).
const COMM_LEN: usize = 15;

/// A set of profiles, searched in order; fallback profiles are searched last.
#[derive(Debug, Clone)]
pub struct ProfileSet {
    profiles: Vec<ScannerProfile>,
}

impl ProfileSet {
    /// The profiles committed in `wrappers/`, compiled in.
    pub fn builtin() -> Result<ProfileSet, ProfileError> {
        let profiles = BUILTIN
            .iter()
            .map(|(file, text)| ScannerProfile::parse_named(text, &format!("wrappers/{file}")))
            .collect::<Result<Vec<_>, _>>()?;
        ProfileSet::new(profiles)
    }

    /// A set from parsed profiles; names must be unique. Fallbacks are moved to the end.
    pub fn new(mut profiles: Vec<ScannerProfile>) -> Result<ProfileSet, ProfileError> {
        for (i, p) in profiles.iter().enumerate() {
            if profiles[..i].iter().any(|q| q.name == p.name) {
                return Err(ProfileError::Invalid {
                    profile: p.name.clone(),
                    key: "name".into(),
                    message: "another profile has this name".into(),
                });
            }
        }
        profiles.sort_by_key(|p| p.fallback);
        Ok(ProfileSet { profiles })
    }

    /// All profiles, fallbacks last.
    pub fn profiles(&self) -> &[ScannerProfile] {
        &self.profiles
    }

    /// The profile called `name`.
    pub fn get(&self, name: &str) -> Option<&ScannerProfile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    /// Which profile and process role a process belongs to, from its executable (path or name,
    /// as /proc/PID/exe) and its comm. A profile's process matches on the exe's basename or full
    /// path, or on the comm (15-byte truncation); one that names a `subcommand` never matches
    /// here, without the arguments. A fallback profile takes anything left, with the role of its
    /// first process.
    pub fn recognise(&self, exe: &str, comm: &str) -> Option<(&ScannerProfile, &str)> {
        let base = exe.rsplit('/').next().unwrap_or(exe);
        let comm_eq = |c: &str| {
            let c = c.as_bytes();
            !comm.is_empty() && &c[..c.len().min(COMM_LEN)] == comm.as_bytes()
        };
        let specific = self.profiles.iter().filter(|p| !p.fallback).find_map(|p| {
            p.processes
                .iter()
                .find(|r| {
                    r.subcommand.is_empty()
                        && (r.exe.iter().any(|e| !exe.is_empty() && (e == exe || e == base))
                            || r.comm.iter().any(|c| comm_eq(c)))
                })
                .map(|r| (p, r.role.as_str()))
        });
        specific.or_else(|| {
            self.profiles
                .iter()
                .filter(|p| p.fallback)
                .find_map(|p| p.processes.first().map(|r| (p, r.role.as_str())))
        })
    }
}

impl ProfileSet {
    /// The scanner in a command line that may start with wrappers (`ip netns exec NS`, `sudo`,
    /// `env`, `taskset`...): the first word a specific (non-fallback) profile recognises by its
    /// executable name (and, where the profile names one, the subcommand after it), with its
    /// index. None when no specific profile knows any word.
    pub fn find_in_argv(&self, argv: &[String]) -> Option<(&ScannerProfile, usize)> {
        argv.iter().enumerate().find_map(|(i, word)| {
            let base = word.rsplit('/').next().unwrap_or(word);
            let next = argv.get(i + 1).map(String::as_str);
            self.profiles
                .iter()
                .filter(|p| !p.fallback)
                .find(|p| {
                    p.processes.iter().any(|r| {
                        r.exe.iter().any(|e| e == base || e == word)
                            && (r.subcommand.is_empty()
                                || next.is_some_and(|n| r.subcommand.iter().any(|s| s == n)))
                    })
                })
                .map(|p| (p, i))
        })
    }

    /// The words of a command line a person wants to read: from the scanner's executable on
    /// (the word `find_in_argv` finds, as the profile and the requested rate are found), else
    /// after the wrappers that only place or schedule the command (`skip_wrappers`).
    pub fn scanner_words(&self, argv: &[String]) -> Vec<String> {
        match self.find_in_argv(argv) {
            Some((_, at)) => argv[at..].to_vec(),
            None => skip_wrappers(argv),
        }
    }

    /// The fallback profile (`generic`).
    pub fn fallback(&self) -> Option<&ScannerProfile> {
        self.profiles.iter().find(|p| p.fallback)
    }
}

/// `argv` without the wrappers in front of the command they run: `ip netns exec NS`, `sudo`,
/// `env VAR=..`, `setsid`, `nice -n N`, `taskset -c CPUS`, `chrt`, `timeout DURATION`,
/// `cgexec -g CONTROLLERS:PATH`, `systemd-run --scope ...`, and `sh -c` with a script
/// that ends by exec'ing its arguments (`sh -c '...; exec "$@"' NAME CMD...`) or that is
/// `exec CMD...`. A wrapper it does not know ends the stripping: the rest is shown as it is.
pub fn skip_wrappers(argv: &[String]) -> Vec<String> {
    strip_wrappers(argv).0
}

/// `skip_wrappers`, and whether the words left still start with a wrapper it cannot see
/// through (a shell script that does more than `exec` a command, a wrapper with nothing after
/// it): then they are not the scanner's words, and its rate can only be read from the process
/// that runs it (src/wrappers/exec.rs).
pub fn strip_wrappers(argv: &[String]) -> (Vec<String>, bool) {
    let mut words: Vec<String> = argv.to_vec();
    loop {
        let Some(first) = words.first() else {
            return (words, false);
        };
        let base = first.rsplit('/').next().unwrap_or(first).to_string();
        let word = |i: usize| words.get(i).map(String::as_str);
        // Words a wrapper takes before its command: itself, its options and their values.
        let skip = match base.as_str() {
            "ip" if word(1) == Some("netns") && word(2) == Some("exec") && words.len() > 4 => 4,
            "sudo" => options_end(&words, &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"]),
            "env" => {
                let mut i = options_end(&words, &["-u", "-C", "-S"]);
                while word(i).is_some_and(|w| w.contains('=') && !w.starts_with('=')) {
                    i += 1;
                }
                i
            }
            "setsid" | "ionice" | "stdbuf" => options_end(&words, &["-c", "-n", "-p", "-i", "-o", "-e"]),
            "nice" => options_end(&words, &["-n"]),
            // Its options, then the duration.
            "timeout" => options_end(&words, &["-s", "-k", "--signal", "--kill-after"]) + 1,
            "cgexec" => options_end(&words, &["-g"]),
            "systemd-run" => options_end(
                &words,
                &[
                    "-p",
                    "--property",
                    "-u",
                    "--unit",
                    "--slice",
                    "--uid",
                    "--gid",
                    "-E",
                    "--setenv",
                    "--description",
                    "-M",
                    "--machine",
                    "-H",
                    "--host",
                    "--nice",
                    "--working-directory",
                    "--service-type",
                    "--on-active",
                    "--on-calendar",
                    "--timer-property",
                ],
            ),
            // Its options, then the CPU list (or mask).
            "taskset" => options_end(&words, &[]) + 1,
            // Its options, then the priority.
            "chrt" => options_end(&words, &[]) + 1,
            "sh" | "bash" | "dash" if word(1) == Some("-c") => {
                let script = word(2).unwrap_or("").trim();
                if let Some(cmd) = script.strip_prefix("exec ") {
                    // Plain words only: a quoted script is shown as it is.
                    if cmd.contains(['\'', '"', '\\', '$', ';', '|', '&', '<', '>', '`']) {
                        return (words, true);
                    }
                    let mut rest: Vec<String> = cmd.split_whitespace().map(String::from).collect();
                    rest.extend(words.drain(3..));
                    words = rest;
                    continue;
                }
                if script.ends_with("exec \"$@\"") && words.len() > 4 {
                    // $0 is the word after the script; the command is the words after it.
                    4
                } else {
                    return (words, true);
                }
            }
            _ => return (words, false),
        };
        if skip == 0 || skip >= words.len() {
            return (words, true);
        }
        words.drain(..skip);
    }
}

/// Index of the first word after `words[0]` that is not one of its options; `with_value` are the
/// options that take the next word as their value.
fn options_end(words: &[String], with_value: &[&str]) -> usize {
    let mut i = 1;
    while let Some(w) = words.get(i) {
        if w == "--" {
            return i + 1;
        }
        if !w.starts_with('-') || w == "-" {
            break;
        }
        i += if with_value.contains(&w.as_str()) { 2 } else { 1 };
    }
    i
}

#[cfg(test)]
mod tests;
