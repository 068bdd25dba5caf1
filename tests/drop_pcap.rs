//! The pcapng of the family's dropped packets (`--pcap FILE`, and the bundle's drops.pcapng),
//! read by Debian's tshark: a qdisc-drop lab run's packets and comments against the run's drop
//! table, tc's drop count and the lab's addresses. Privileged (BPF, namespaces): fails without
//! root.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use scanprof::analysis::{DropRow, Summary};
use scanprof::collect::headers::Sampling;
use scanprof::collect::DropClass;
use scanprof::netlab::{Side, TbfConfig};

const PORT: u16 = 9000;
/// Longest a run may take (stretched by SCANPROF_TEST_PATIENCE, as its 30 s --duration is: the
/// duration only bounds a run that ends when its sender does).
const RUN_TIMEOUT: Duration = Duration::from_secs(45);

/// A file or directory of this test, removed when dropped (also on failure).
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("scanprof-pcap-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        let _ = std::fs::remove_file(&p);
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(&self.0);
    }
}

/// One packet as tshark reads it.
#[derive(Debug)]
struct Packet {
    comment: String,
    ip_dst: String,
    udp_dstport: String,
}

impl Packet {
    /// `key=value` of the comment.
    fn field(&self, key: &str) -> &str {
        self.comment
            .split(' ')
            .find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
            .unwrap_or_else(|| panic!("no {key}= in the comment {:?}", self.comment))
    }

    /// Whether the comment names this drop-table row.
    fn is_of(&self, row: &DropRow) -> bool {
        self.field("reason") == row.reason
            && self.field("location") == row.location
            && self.field("device") == row.device.as_deref().unwrap_or("-")
            && self.field("netns") == row.netns.to_string()
            && Some(self.field("pid")) == row.pid.map(|p| p.to_string()).as_deref()
            && self.field("class") == row.class.name()
    }
}

/// `tshark -r FILE`: each packet's comment (pcapng opt_comment: `frame.comment` in tshark 4.0)
/// and the IPv4/UDP destination it decodes from the bytes.
fn tshark(file: &Path) -> Vec<Packet> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-T", "fields", "-E", "separator=/t"])
        .args(["-e", "frame.comment", "-e", "ip.dst", "-e", "udp.dstport"])
        .output()
        .unwrap_or_else(|e| panic!("tshark did not run ({e}): scripts/setup installs it"));
    assert!(
        out.status.success(),
        "tshark -r {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 3, "tshark line {l:?}");
            Packet {
                comment: f[0].to_string(),
                ip_dst: f[1].to_string(),
                udp_dstport: f[2].to_string(),
            }
        })
        .collect()
}

/// The packet count scanprof's stderr line names ("pcapng written to F: N packet headers ...").
fn said_written(run: &Finished) -> usize {
    run.stderr_lines
        .iter()
        .find_map(|l| l.strip_prefix("scanprof: pcapng written to "))
        .and_then(|rest| rest.split(": ").nth(1))
        .and_then(|n| n.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `pcapng written` line\n{}", run.context()))
}

/// A lab run of `count` 512-byte packets at 5000 pps into a 2 Mbit/s tbf, with `--pcap` and a
/// bundle; returns the summary, tc's drops, and the two files' packets (tshark's reading).
fn qdisc_run(tag: &str, count: u64) -> (Summary, u64, Vec<Packet>, Vec<Packet>, usize, TestLab) {
    let lab = TestLab::new(Some(TbfConfig {
        rate: "2mbit".into(),
        burst: "4kb".into(),
        limit: "10kb".into(),
    }));
    let sink = lab.sink(PORT);
    let pcap = Scratch::new(&format!("{tag}.pcapng"));
    let bundle = Scratch::new(&format!("{tag}-bundle"));
    let bound_s = patience(Duration::from_secs(5)).as_secs_f64();
    let sender = sender_argv(&lab.to(PORT), 5000.0, count, bound_s, &["--size", "512"]);
    let duration = patience(Duration::from_secs(30)).as_secs().to_string();
    let mut args: Vec<String> = [
        "run",
        "--json",
        "--duration",
        &duration,
        "--requested",
        "5000",
        "--pcap",
    ]
    .map(String::from)
    .to_vec();
    args.push(pcap.0.display().to_string());
    args.push("-o".into());
    args.push(bundle.0.display().to_string());
    args.extend(["--", "sh", "-c", "exec \"$@\" 1>&2", "sh"].map(String::from));
    args.extend(sender);
    let argv = in_netns_last(&lab, args);
    let run = Proc::scanprof(&argv).finish(RUN_TIMEOUT);
    let tbf = lab.drained_root_qdisc();
    let _ = stop_sink(sink);
    run.assert_success();
    assert_all_probes_attached(&run.started());
    let s = run.summary();
    let written = said_written(&run);
    let from_flag = tshark(&pcap.0);
    let from_bundle = tshark(&bundle.0.join("drops.pcapng"));
    (s, tbf.drops, from_flag, from_bundle, written, lab)
}

/// `scanprof run ... -- ip netns exec SENDER_NS sh -c ... sender...`: the launched command runs
/// in the lab's sender namespace (the words after `--` are wrapped).
fn in_netns_last(lab: &TestLab, mut args: Vec<String>) -> Vec<String> {
    let at = args
        .iter()
        .position(|a| a == "--")
        .expect("a -- in the arguments")
        + 1;
    let command = args.split_off(at);
    args.extend(in_netns(&lab.lab.sender_ns, &command));
    args
}

/// What every run's files must show: the same packets in both, as many as scanprof said, each
/// an IPv4/UDP packet to the lab's receiver whose comment names a row of the drop table, within
/// the sampling's bound for that row.
fn check_against_the_drop_table(
    s: &Summary,
    lab: &TestLab,
    flag: &[Packet],
    bundle: &[Packet],
    written: usize,
) -> Vec<(DropRow, usize)> {
    assert_eq!(flag.len(), written, "packets in --pcap vs scanprof's count");
    assert_eq!(
        bundle.len(),
        written,
        "packets in the bundle's drops.pcapng vs --pcap"
    );
    for (a, b) in flag.iter().zip(bundle) {
        assert_eq!(a.comment, b.comment);
    }
    assert_eq!(
        s.health.lost_events, 0,
        "ring-buffer records lost: the counts cannot match"
    );
    let family: Vec<&DropRow> = s
        .drops
        .iter()
        .filter(|d| d.class != DropClass::Unrelated)
        .collect();
    let target_addr = lab.lab.target_addr.to_string();
    for p in flag {
        assert!(
            family.iter().any(|row| p.is_of(row)),
            "a packet whose comment names no row of the drop table: {p:?}\nrows: {family:?}"
        );
        let seq: u64 = p.field("seq").parse().unwrap();
        assert!(
            Sampling::PROBES.keeps(seq),
            "seq {seq} is not one the rule keeps: {p:?}"
        );
        if p.field("reason") == "QDISC_DROP" {
            // the bytes are the network header on: the sender's own UDP packet to the receiver
            assert_eq!(
                (p.ip_dst.as_str(), p.udp_dstport.as_str()),
                (target_addr.as_str(), "9000"),
                "{p:?}"
            );
        }
    }
    // A row's drops spread over the CPUs: each CPU keeps min(n, first) of its n, plus every
    // `every`-th. So at least min(count, first) (all of them when count <= first), at most
    // first per CPU plus count / every.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let r = Sampling::PROBES;
    family
        .iter()
        .map(|row| {
            let kept = flag.iter().filter(|p| p.is_of(row)).count() as u64;
            let least = row.count.min(r.first);
            let most = (cpus * r.first + row.count / r.every).min(row.count);
            assert!(
                (least..=most).contains(&kept),
                "{kept} headers of {row:?}: outside [{least}, {most}]"
            );
            ((*row).clone(), kept as usize)
        })
        .collect()
}

/// Many drops: the headers are sampled, and the file says so and matches the table row by row.
#[test]
fn a_qdisc_drop_run_writes_sampled_headers_tshark_reads_with_the_drop_tables_names() {
    let test = privileged();
    const COUNT: u64 = 6_000;
    let (s, tc_drops, flag, bundle, written, lab) = qdisc_run("many", COUNT);
    let rows = check_against_the_drop_table(&s, &lab, &flag, &bundle, written);
    let qdisc: Vec<&(DropRow, usize)> = rows
        .iter()
        .filter(|(r, _)| lab.at(Side::Sender, r) && r.reason == "QDISC_DROP")
        .collect();
    let drops: u64 = qdisc.iter().map(|(r, _)| r.count).sum();
    let kept: usize = qdisc.iter().map(|(_, k)| k).sum();
    eprintln!(
        "pcap (sampled): tc dropped {tc_drops}; drop table {drops} QDISC_DROP in {} rows; {kept} headers in the \
         pcapng ({} packets in all)",
        qdisc.len(),
        flag.len()
    );
    assert_eq!(drops, tc_drops, "QDISC_DROP drops vs tc's");
    assert!(
        drops > Sampling::PROBES.first * 4,
        "too few drops to sample: {drops}"
    );
    assert!(
        (kept as u64) < drops,
        "{kept} headers of {drops} drops: nothing was sampled out"
    );
    lab.destroy();
    test.assert_released("the test's scanprof processes ended");
}

/// Few drops (under the bound of a row's first 64): every drop has its header, so the pcapng's
/// packets are exactly the drop table's and tc's count.
#[test]
fn a_run_with_few_qdisc_drops_has_a_header_for_every_drop() {
    let test = privileged();
    // ~28 packets fill the bucket and the queue, the rest of a 16 ms burst is dropped
    const COUNT: u64 = 70;
    let (s, tc_drops, flag, bundle, written, lab) = qdisc_run("few", COUNT);
    let rows = check_against_the_drop_table(&s, &lab, &flag, &bundle, written);
    let family: u64 = rows.iter().map(|(r, _)| r.count).sum();
    let qdisc: u64 = rows
        .iter()
        .filter(|(r, _)| lab.at(Side::Sender, r) && r.reason == "QDISC_DROP")
        .map(|(r, _)| r.count)
        .sum();
    eprintln!(
        "pcap (every drop): tc dropped {tc_drops}; drop table {qdisc} QDISC_DROP, {family} family drops; {} packets \
         in the pcapng",
        flag.len()
    );
    assert!(
        qdisc > 0 && qdisc <= Sampling::PROBES.first,
        "{qdisc} QDISC_DROP drops: not a test of the unsampled case"
    );
    assert_eq!(qdisc, tc_drops, "QDISC_DROP drops vs tc's");
    assert!(family <= Sampling::PROBES.first, "{rows:?}");
    assert_eq!(flag.len() as u64, family, "one header per family drop");
    lab.destroy();
    test.assert_released("the test's scanprof processes ended");
}
