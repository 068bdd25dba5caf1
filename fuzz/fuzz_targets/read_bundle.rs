//! Any bytes as a bundle's events.ndjson: the reader must never panic, and whatever it accepts
//! must render as a report in every format.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use scanprof::cli::ReportFormat;
use scanprof::commands::report::render;
use scanprof::views::export::bundle::parse;

fuzz_target!(|data: &[u8]| {
    let name = Path::new("fuzz/events.ndjson");
    if let Ok((rec, _issues)) = parse(data, name) {
        for format in [ReportFormat::Text, ReportFormat::Md, ReportFormat::Json] {
            let _ = render(&rec, Path::new("/nonexistent-bundle"), format);
        }
    }
});
