//! The integration tests, one test binary (issue 29): each tests/*.rs is a module of this crate
//! (`scanners::masscan_at_500_pps`), all sharing tests/common, declared here once. One binary
//! links the crate and tests/common once, not once per file (Cargo.toml: `autotests = false` and
//! this `[[test]]`). A new file here is declared below, or it is never built nor run
//! (`architecture_tests::every_test_file_is_a_module_of_the_one_test_binary` fails).
//!
//! The tests of every module are threads of one process: the privileged ones take one mutex
//! (`common::privileged`), so they run one at a time, whatever their module.
//!
//! Run: `cargo test --test it -- --test-threads=2`; one module's: `cargo test --test it
//! privileged::`; one test: `cargo test --test it privileged::qdisc_drops_match_tc_and_bpftrace
//! -- --exact`.

mod common;

mod agent;
mod attach_mid_send;
mod baseline;
mod connect_attempts;
mod deploy;
mod device_stages;
mod diagnosis_suite;
mod doctor_and_neighbours;
mod drop_attribution;
mod drop_pcap;
mod fd_reuse;
mod map_memory;
mod metrics;
mod modern_scanners;
mod perfetto_trace;
mod precision;
mod privileged;
mod probe_cost;
mod receive_cost;
mod receive_funnel;
mod record_report;
mod recount;
mod rediagnose;
mod reply_devices;
mod reply_funnel;
mod ring_funnel;
mod run_phases;
mod safety;
mod scanner_profiles;
mod scanners;
mod senders;
mod sweep;
mod tui_e2e;
mod unishape;
