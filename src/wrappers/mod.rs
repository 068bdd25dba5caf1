//! Scanner profiles: declarative per-scanner facts (`wrappers/<scanner>.toml`) that tell the rest
//! of scanprof how to recognise a scanner's processes and threads, what rate it was asked for,
//! and which functions to uprobe. Pure data and parsing: `src/probes` attaches what `[[probe]]`
//! lists, `src/analysis` compares the achieved rate with `requested_rate`. See docs/wrappers.md.

mod profile;
mod rate;

pub use profile::{
    ArgType, BufferField, FieldCondition, OutputClaim, Probe, ProbeArg, ProbeBuffer, ProbeRead, ProbeRole,
    ProcessRule, ProfileError, RateKind, RateModel, RateMultiplier, RateOption, RateRules, RateUnit,
    Recipient, ScannerProfile, ThreadPick, ThreadRule, ValueForm, SCHEMA_VERSION,
};
pub use rate::{requested_rate, RequestedRate, WorkUnitRate};

/// The profiles shipped with scanprof: (file name, text), generic fallback last.
const BUILTIN: &[(&str, &str)] = &[
    (
        "unicornscan.toml",
        include_str!("../../wrappers/unicornscan.toml"),
    ),
    ("masscan.toml", include_str!("../../wrappers/masscan.toml")),
    ("zmap.toml", include_str!("../../wrappers/zmap.toml")),
    ("nmap.toml", include_str!("../../wrappers/nmap.toml")),
    ("hping3.toml", include_str!("../../wrappers/hping3.toml")),
    (
        "scanprof-send.toml",
        include_str!("../../wrappers/scanprof-send.toml"),
    ),
    ("generic.toml", include_str!("../../wrappers/generic.toml")),
];

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
    /// path, or on the comm (15-byte truncation). A fallback profile takes anything left, with
    /// the role of its first process.
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
                    r.exe.iter().any(|e| !exe.is_empty() && (e == exe || e == base))
                        || r.comm.iter().any(|c| comm_eq(c))
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
    /// executable name, with its index. None when no specific profile knows any word.
    pub fn find_in_argv(&self, argv: &[String]) -> Option<(&ScannerProfile, usize)> {
        argv.iter().enumerate().find_map(|(i, word)| {
            let base = word.rsplit('/').next().unwrap_or(word);
            self.profiles
                .iter()
                .filter(|p| !p.fallback)
                .find(|p| {
                    p.processes
                        .iter()
                        .any(|r| r.exe.iter().any(|e| e == base || e == word))
                })
                .map(|p| (p, i))
        })
    }

    /// The fallback profile (`generic`).
    pub fn fallback(&self) -> Option<&ScannerProfile> {
        self.profiles.iter().find(|p| p.fallback)
    }
}

#[cfg(test)]
mod tests;
