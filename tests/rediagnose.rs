//! Recorded bundles re-diagnosed by this tree: the verdicts of the summary and of every tick,
//! recomputed from the recorded figures, must be the ones the recording binary wrote. For
//! refactors of src/analysis/verdict: `scripts/compare-reports` re-renders a bundle's stored
//! verdicts, this recomputes them.
//!
//!   REDIAGNOSE=DIR_OF_BUNDLES cargo test --test it rediagnose:: -- --ignored --nocapture

use std::path::Path;

#[test]
#[ignore = "needs REDIAGNOSE=DIR, a folder of recorded bundles (`lab SCENARIO --export DIR`)"]
fn recorded_verdicts_are_recomputed_identically() {
    let dir = std::env::var("REDIAGNOSE")
        .expect("set REDIAGNOSE to a folder of bundles (`scanprof lab SCENARIO --export DIR/NAME`)");
    let mut bundles = 0;
    let mut differ = Vec::new();
    for e in std::fs::read_dir(&dir).expect("REDIAGNOSE is a readable folder") {
        let p = e.expect("a folder entry").path();
        let (rec, _) = scanprof::views::export::bundle::read(Path::new(&p)).expect("a bundle");
        let s = rec.summary.expect("the bundle has a summary");
        let recorded = serde_json::to_string(&s.verdicts).unwrap();
        let again = serde_json::to_string(&scanprof::analysis::verdict::for_summary(&s)).unwrap();
        if recorded != again {
            differ.push(format!(
                "{} summary:\nrecorded {recorded}\nnow      {again}",
                p.display()
            ));
        }
        let mut same = 0;
        for t in &rec.ticks {
            let recorded = serde_json::to_string(&t.verdicts).unwrap();
            let again = serde_json::to_string(&scanprof::analysis::verdict::for_snapshot(t)).unwrap();
            if recorded == again {
                same += 1;
            } else {
                differ.push(format!(
                    "{} tick {}:\nrecorded {recorded}\nnow      {again}",
                    p.display(),
                    t.tick
                ));
            }
        }
        println!(
            "{}: {} summary verdicts, {same} of {} ticks' verdicts recomputed identically",
            p.display(),
            s.verdicts.len(),
            rec.ticks.len()
        );
        bundles += 1;
    }
    assert!(bundles > 0, "no bundle in {dir}");
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
