//! Which process of the family runs the scanner: chosen again at every exec in the family (and,
//! for `attach`, among the processes found at start) from the image that process runs, never
//! from the wrappers that started it (`sh -c`, `ip netns exec`, `timeout`, `sudo`...). The
//! requested rate is read from that process's own command line. Pure: the session feeds it the
//! exec records with the command line it read from /proc/PID/cmdline.

use super::{requested_rate, ProfileSet, RequestedRate, ScannerProfile};

/// A process's image after an exec, or as found at attach.
#[derive(Debug, Clone, Copy)]
pub struct Image<'a> {
    pub pid: u32,
    /// its comm after the exec (the file's basename, truncated to 15 bytes)
    pub comm: &'a str,
    /// the file it runs (the exec record's path, or /proc/PID/exe)
    pub exe: &'a str,
    /// its command line, argv[0] included
    pub argv: &'a [String],
}

/// The process that runs the scanner: its profile, and the rate its command line asks for.
#[derive(Debug, Clone)]
pub struct ScannerProcess {
    pub profile: ScannerProfile,
    pub pid: u32,
    pub comm: String,
    /// the file it runs
    pub exe: String,
    /// its command line, argv[0] included
    pub argv: Vec<String>,
    /// the requested rate, read from `argv` with the profile's `[rate]` rules
    pub rate: RequestedRate,
}

/// The family's scanner process as its execs show it.
#[derive(Debug, Clone)]
pub struct ScannerChoice {
    set: ProfileSet,
    /// `--profile`: only its processes are the scanner
    explicit: Option<ScannerProfile>,
    chosen: Option<ScannerProcess>,
}

impl ScannerChoice {
    /// Chooses among the specific profiles of `set`, or, when the user named one (`--profile`),
    /// recognises only that profile's processes.
    pub fn new(set: ProfileSet, explicit: Option<ScannerProfile>) -> ScannerChoice {
        ScannerChoice {
            set,
            explicit,
            chosen: None,
        }
    }

    /// A family process now runs `image`. When a profile recognises it as a process the user
    /// starts (not a helper the scanner starts itself, such as unicornscan's unisend), it is the
    /// scanner from now on: the profile is chosen (again) from it and the requested rate read
    /// from its command line. A wrapper, a helper or any other command changes nothing: None.
    pub fn exec(&mut self, image: Image<'_>) -> Option<&ScannerProcess> {
        let profile = match &self.explicit {
            Some(p) => p.started_as(image.exe, image.comm, image.argv).then_some(p),
            None => self
                .set
                .profiles()
                .iter()
                .filter(|p| !p.fallback)
                .find(|p| p.started_as(image.exe, image.comm, image.argv)),
        }?;
        self.chosen = Some(ScannerProcess {
            rate: requested_rate(profile, image.argv, None),
            profile: profile.clone(),
            pid: image.pid,
            comm: image.comm.to_string(),
            exe: image.exe.to_string(),
            argv: image.argv.to_vec(),
        });
        self.chosen.as_ref()
    }

    /// The latest process chosen, if any has been.
    pub fn chosen(&self) -> Option<&ScannerProcess> {
        self.chosen.as_ref()
    }
}

impl ScannerProfile {
    /// Whether a process running `exe` (its comm `comm`, its command line `argv`) is one of this
    /// profile's processes that the user starts (a `[[process]]` without `parent`): by the
    /// exe's basename or full path, else by comm (15-byte truncation); a process that names a
    /// `subcommand` needs it as argv[1].
    pub fn started_as(&self, exe: &str, comm: &str, argv: &[String]) -> bool {
        let base = exe.rsplit('/').next().unwrap_or(exe);
        let comm_eq =
            |c: &str| !comm.is_empty() && c.as_bytes()[..c.len().min(super::COMM_LEN)] == *comm.as_bytes();
        self.processes.iter().filter(|r| r.parent.is_none()).any(|r| {
            (r.exe.iter().any(|e| !exe.is_empty() && (e == exe || e == base))
                || r.comm.iter().any(|c| comm_eq(c)))
                && (r.subcommand.is_empty() || argv.get(1).is_some_and(|a| r.subcommand.contains(a)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wrappers::RateKind;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    /// Feeds one exec record: (pid, exe, command line).
    fn exec<'c>(
        c: &'c mut ScannerChoice,
        pid: u32,
        exe: &str,
        argv: &[String],
    ) -> Option<&'c ScannerProcess> {
        let comm = exe.rsplit('/').next().unwrap_or(exe);
        let comm = &comm[..comm.len().min(15)];
        c.exec(Image { pid, comm, exe, argv })
    }

    /// The launch: `sh -c '...; exec ip netns exec NS masscan --rate 50000 ...'`. The
    /// shell and `ip` change nothing; masscan's exec chooses the masscan profile and its own
    /// --rate, not the default 100 pps read from the wrapper's words.
    #[test]
    fn the_scanner_is_chosen_at_its_own_exec_not_at_the_wrappers() {
        let mut c = ScannerChoice::new(ProfileSet::builtin().unwrap(), None);
        let script = "ip link set lo up; exec ip netns exec lab masscan --rate 50000 -p80 10.9.0.2";
        let sh = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
        assert!(exec(&mut c, 100, "/bin/sh", &sh).is_none());
        assert!(exec(&mut c, 101, "/usr/sbin/ip", &words("ip link set lo up")).is_none());
        let ip = words("ip netns exec lab masscan --rate 50000 -p80 10.9.0.2");
        assert!(exec(&mut c, 100, "/usr/sbin/ip", &ip).is_none());
        assert!(c.chosen().is_none());
        let masscan = words("masscan --rate 50000 -p80 10.9.0.2");
        let s = exec(&mut c, 100, "/usr/bin/masscan", &masscan).expect("masscan not chosen");
        assert_eq!(s.profile.name, "masscan");
        assert_eq!((s.pid, s.comm.as_str()), (100, "masscan"));
        assert_eq!(s.rate.pps, Some(50000.0));
        assert_eq!(s.rate.kind, RateKind::Exact);
    }

    /// Every wrapper the issue names execs a scanner at the end of a chain: only the scanner's
    /// exec chooses, whatever the wrapper's own words hold (a --rate of `timeout` or `env`'s
    /// variables are not the scanner's).
    #[test]
    fn no_wrapper_chooses_a_profile_or_gives_a_rate() {
        let wrappers = [
            ("/usr/bin/timeout", "timeout 30 zmap -r 700 10.9.0.0/24"),
            ("/usr/bin/nice", "nice -n 5 zmap -r 700 10.9.0.0/24"),
            ("/usr/bin/taskset", "taskset -c 1 zmap -r 700 10.9.0.0/24"),
            ("/usr/bin/chrt", "chrt -f 10 zmap -r 700 10.9.0.0/24"),
            ("/usr/bin/env", "env RATE=5 zmap -r 700 10.9.0.0/24"),
            ("/usr/bin/sudo", "sudo -u root zmap -r 700 10.9.0.0/24"),
            ("/usr/bin/cgexec", "cgexec -g cpu:scan zmap -r 700 10.9.0.0/24"),
            (
                "/usr/bin/systemd-run",
                "systemd-run --scope -p CPUQuota=50% zmap -r 700 10.9.0.0/24",
            ),
            ("/bin/sh", "sh -c exec\\ zmap\\ -r\\ 700"),
            ("/usr/sbin/ip", "ip netns exec lab zmap -r 700 10.9.0.0/24"),
        ];
        for (exe, line) in wrappers {
            let mut c = ScannerChoice::new(ProfileSet::builtin().unwrap(), None);
            assert!(
                exec(&mut c, 7, exe, &words(line)).is_none(),
                "{exe} chose a scanner"
            );
            let s = exec(&mut c, 8, "/usr/sbin/zmap", &words("zmap -r 700 10.9.0.0/24")).expect(exe);
            assert_eq!(
                (s.profile.name.as_str(), s.pid, s.rate.pps),
                ("zmap", 8, Some(700.0)),
                "{exe}"
            );
        }
    }

    /// `--profile masscan`: the profile stays the one named, and the rate comes from the
    /// masscan process's argv, never from the wrapper's words (which gave masscan's default).
    #[test]
    fn an_explicit_profile_reads_the_rate_from_its_scanners_process() {
        let set = ProfileSet::builtin().unwrap();
        let masscan = set.get("masscan").unwrap().clone();
        let mut c = ScannerChoice::new(set, Some(masscan));
        assert!(exec(&mut c, 5, "/bin/sh", &words("sh -c x")).is_none());
        // Another scanner's exec is not the named profile's process.
        assert!(exec(&mut c, 6, "/usr/sbin/zmap", &words("zmap -r 9")).is_none());
        let s = exec(
            &mut c,
            5,
            "/usr/bin/masscan",
            &words("masscan --rate 500 10.9.0.2"),
        )
        .unwrap();
        assert_eq!((s.profile.name.as_str(), s.rate.pps), ("masscan", Some(500.0)));
    }

    /// A helper the scanner starts itself (unicornscan's unisend, `parent = "master"`) does
    /// not replace the master: its command line holds no rate. A later scanner the user's
    /// script starts does.
    #[test]
    fn a_scanners_helpers_keep_the_choice_and_a_later_scanner_takes_it() {
        let mut c = ScannerChoice::new(ProfileSet::builtin().unwrap(), None);
        let s = exec(
            &mut c,
            10,
            "/usr/bin/unicornscan",
            &words("unicornscan -r 300 10.9.0.2:53"),
        )
        .unwrap();
        assert_eq!(s.rate.pps, Some(300.0));
        assert!(exec(&mut c, 11, "/usr/lib/unicornscan/unisend", &words("unisend")).is_none());
        assert_eq!(c.chosen().map(|s| s.pid), Some(10));
        let s = exec(
            &mut c,
            12,
            "/usr/bin/masscan",
            &words("masscan --rate 20 10.9.0.2"),
        )
        .unwrap();
        assert_eq!(
            (s.profile.name.as_str(), s.pid, s.rate.pps),
            ("masscan", 12, Some(20.0))
        );
    }

    /// A profile that names a subcommand needs it in the process's own argv: `scanprof send`
    /// is the sender, `scanprof recv` is not.
    #[test]
    fn a_subcommand_is_read_from_the_processes_own_argv() {
        let mut c = ScannerChoice::new(ProfileSet::builtin().unwrap(), None);
        assert!(exec(
            &mut c,
            3,
            "/usr/local/bin/scanprof",
            &words("scanprof recv --port 9")
        )
        .is_none());
        let s = exec(
            &mut c,
            4,
            "/usr/local/bin/scanprof",
            &words("scanprof send --rate 900 127.0.0.1"),
        )
        .unwrap();
        assert_eq!(s.profile.name, "scanprof-send");
    }
}
