//! How every view lists the verdicts: each one that is strong or explains a share that prints
//! (0.1% and up) in full, in rank order; the rest (weak, at 0.0%) counted and named in one
//! sentence. Built once here so the text report, report.md and the terminal view list the same
//! verdicts; the JSON keeps every verdict whole.

use super::{Confidence, Verdict};
use crate::units::pct;

/// The smallest share that prints as more than 0.0% (`units::pct` writes one decimal).
pub const LISTED_SHARE: f64 = 0.0005;

impl Verdict {
    /// Whether every view shows it in full: strong evidence, or a share that prints above
    /// 0.0%. A weak verdict at 0.0% is counted, not shown, and ranked after every other.
    pub fn listed(&self) -> bool {
        self.confidence == Confidence::Strong || self.share >= LISTED_SHARE
    }
}

/// The verdicts as every view lists them.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing<'v> {
    /// strong or share-bearing verdicts, in rank order
    pub shown: Vec<&'v Verdict>,
    /// weak verdicts at 0.0%, in rank order: counted and named, not shown
    pub rest: Vec<&'v Verdict>,
}

impl<'v> Listing<'v> {
    /// The listing of `verdicts` (ranked, as the diagnosis returns them).
    pub fn of(verdicts: &'v [Verdict]) -> Listing<'v> {
        let (shown, rest) = verdicts.iter().partition(|v| v.listed());
        Listing { shown, rest }
    }

    /// The sentence that counts what is not shown: `2 more at 0.0%, with weak evidence:
    /// ring_full, preempted (each in full in the JSON)` (`2 at 0.0%...` when none is shown);
    /// None when every verdict is shown.
    pub fn rest_sentence(&self) -> Option<String> {
        if self.rest.is_empty() {
            return None;
        }
        let names: Vec<&str> = self.rest.iter().map(|v| v.cause.as_str()).collect();
        Some(format!(
            "{}{} at {}, with weak evidence: {} (each in full in the JSON)",
            self.rest.len(),
            if self.shown.is_empty() { "" } else { " more" },
            pct(0.0),
            names.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::receive::ReceiveView;
    use crate::analysis::rings::RingView;
    use crate::analysis::snapshot::Summary;
    use crate::analysis::verdict::{for_summary, Cause, Kind};
    use crate::collect::rings::RingKind;

    /// libpcap's ring as masscan opens it: 32 frames of 128 KiB in 4 MiB.
    fn pcap_ring(queued: u64, dropped: u64) -> RingView {
        RingView::fixture(RingKind::TpacketV2, 4 << 20, 32, queued, dropped)
    }

    /// A paced run that kept up (995 of 1000 pps for 10 s: a strong `no_gap`) whose listener's
    /// ring dropped `dropped` of `queued + dropped` frames.
    fn kept_up_with_ring(queued: u64, dropped: u64) -> Summary {
        Summary {
            duration_s: 10.0,
            send_window_s: 10.0,
            requested_pps: Some(1000.0),
            achieved_pps: 995.0,
            ratio: Some(0.995),
            packets: 9950,
            send_calls: 9950,
            receive: Some(ReceiveView {
                rings: vec![pcap_ring(queued, dropped)],
                ..Default::default()
            }),
            ..Summary::for_tests()
        }
    }

    fn verdict(cause: Cause, kind: Kind, share: f64, confidence: Confidence) -> Verdict {
        Verdict::bare(cause, kind, share, confidence)
    }

    #[test]
    fn a_weak_verdict_at_0_percent_never_ranks_above_a_strong_one() {
        // 2 frames of 10,328 missed: a weak ring_full at 0.0%, beside a strong no_gap.
        let v = for_summary(&kept_up_with_ring(10_326, 2));
        let ring = v
            .iter()
            .position(|v| v.cause == Cause::RingFull)
            .expect("ring_full");
        assert_eq!(v[ring].confidence, Confidence::Weak);
        assert!(!v[ring].listed(), "{:?}", v[ring]);
        let strong = v
            .iter()
            .position(|v| v.confidence == Confidence::Strong)
            .unwrap_or_else(|| panic!("a strong no_gap: {v:#?}"));
        assert!(strong < ring, "{v:#?}");
        assert!(v[..ring].iter().all(|v| v.listed()), "{v:#?}");
        // A share that prints keeps its place by kind and share.
        let v = for_summary(&kept_up_with_ring(9_000, 1_328));
        assert_eq!(v[0].cause, Cause::RingFull, "{v:#?}");
    }

    #[test]
    fn ring_advice_is_sized_to_the_frames_lost() {
        // 2 lost frames of 128 KiB beside a 4 MiB ring: the next power of two, 8 MiB, not the
        // 512 MiB a second of arrivals at 128 KiB a frame would take.
        let v = for_summary(&kept_up_with_ring(10_326, 2));
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        assert!(
            r.next_step.contains("pcap_set_buffer_size(8388608)"),
            "{}",
            r.next_step
        );
        assert!(
            r.evidence
                .iter()
                .any(|e| e.contains("its 2 dropped frames take ~262144 more")),
            "{:#?}",
            r.evidence
        );
        // Many frames lost: held + lost, up to a second of arrivals (1,032.8 frames/s of
        // 128 KiB: ~135 MB, 256 MiB as a figure people type).
        let v = for_summary(&kept_up_with_ring(5_000, 5_328));
        let r = v.iter().find(|v| v.cause == Cause::RingFull).expect("ring_full");
        assert!(
            r.next_step
                .contains(&format!("pcap_set_buffer_size({})", 256u64 << 20)),
            "{}",
            r.next_step
        );
        assert!(
            r.evidence.iter().any(|e| e.contains("holds that second")),
            "{:#?}",
            r.evidence
        );
    }

    #[test]
    fn the_listing_shows_every_strong_or_share_bearing_verdict_and_counts_the_rest() {
        let ranked = vec![
            verdict(Cause::NoGap, Kind::Gap, 0.0, Confidence::Strong),
            verdict(Cause::Preempted, Kind::Gap, 0.002, Confidence::Weak),
            verdict(Cause::QdiscDrop, Kind::Loss, 0.0, Confidence::Strong),
            verdict(Cause::CpuBound, Kind::Gap, 0.03, Confidence::Weak),
            verdict(Cause::IdleWaits, Kind::Gap, 0.01, Confidence::Weak),
            verdict(Cause::RingFull, Kind::Loss, 0.9, Confidence::Strong),
            verdict(Cause::ClaimMismatch, Kind::Gap, 0.0, Confidence::Weak),
            verdict(Cause::Steal, Kind::Gap, 0.0004, Confidence::Weak),
        ];
        let l = Listing::of(&ranked);
        let shown: Vec<Cause> = l.shown.iter().map(|v| v.cause).collect();
        assert_eq!(
            shown,
            [
                Cause::NoGap,
                Cause::Preempted,
                Cause::QdiscDrop,
                Cause::CpuBound,
                Cause::IdleWaits,
                Cause::RingFull
            ],
            "the sixth, strong, is shown too"
        );
        assert_eq!(
            l.rest_sentence().as_deref(),
            Some("2 more at 0.0%, with weak evidence: claim_mismatch, steal (each in full in the JSON)")
        );
        assert_eq!(Listing::of(&ranked[..6]).rest_sentence(), None);
    }
}
