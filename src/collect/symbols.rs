//! Kernel addresses to `function+0xoffset`, through blazesym and /proc/kallsyms, cached: drop
//! locations and blocking stacks repeat, so each address is resolved once per run.

use std::collections::HashMap;

use blazesym::symbolize::source::{Kernel, Source};
use blazesym::symbolize::{Input, Symbolizer};
use blazesym::MaybeDefault;

/// Scheduler and tracing frames that sit above the function a thread actually waited in.
const SCHEDULER_FRAMES: [&str; 9] = [
    "schedule",
    "__schedule",
    "__traceiter",
    "__bpf_trace",
    "bpf_trace_run",
    "bpf_prog_",
    "preempt_schedule",
    "io_schedule",
    "finish_task_switch",
];

pub struct KernelSymbols {
    symbolizer: Symbolizer,
    source: Source<'static>,
    cache: HashMap<u64, String>,
}

impl Default for KernelSymbols {
    fn default() -> Self {
        let kernel = Kernel {
            vmlinux: MaybeDefault::None,
            ..Default::default()
        };
        KernelSymbols {
            symbolizer: Symbolizer::new(),
            source: Source::Kernel(kernel),
            cache: HashMap::new(),
        }
    }
}

impl KernelSymbols {
    /// `function+0xoffset`, or the bare address in hex when it cannot be resolved
    /// (e.g. kallsyms hidden by kptr_restrict).
    pub fn name(&mut self, addr: u64) -> String {
        if let Some(name) = self.cache.get(&addr) {
            return name.clone();
        }
        let name = self
            .symbolizer
            .symbolize_single(&self.source, Input::AbsAddr(addr))
            .ok()
            .and_then(|s| s.into_sym())
            .map(|sym| format!("{}+0x{:x}", sym.name, sym.offset))
            .unwrap_or_else(|| format!("0x{addr:x}"));
        self.cache.insert(addr, name.clone());
        name
    }

    /// The frames of a kernel stack, innermost first.
    pub fn stack(&mut self, addrs: &[u64]) -> Vec<String> {
        addrs.iter().map(|a| self.name(*a)).collect()
    }
}

/// The function a blocked thread waited in: the innermost frame below the scheduler.
pub fn wait_site(frames: &[String]) -> String {
    frames
        .iter()
        .find(|f| {
            let func = f.split('+').next().unwrap_or(f);
            !SCHEDULER_FRAMES
                .iter()
                .any(|s| func == *s || func.starts_with(s) || func.contains("schedule_timeout"))
        })
        .or(frames.first())
        .map(|f| f.split('+').next().unwrap_or(f).to_string())
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn wait_site_skips_scheduler_and_tracing_frames() {
        let stack = frames(&[
            "bpf_prog_6deef7357e7b4530_on_switch+0x1a4",
            "bpf_trace_run4+0x79",
            "__bpf_trace_sched_switch+0x10",
            "__traceiter_sched_switch+0x3c",
            "__schedule+0x3b1",
            "schedule+0x27",
            "schedule_timeout+0x9e",
            "sock_alloc_send_pskb+0x2a1",
            "__ip_append_data+0xc7e",
        ]);
        assert_eq!(wait_site(&stack), "sock_alloc_send_pskb");
    }

    #[test]
    fn wait_site_of_unknown_or_empty_stacks() {
        assert_eq!(wait_site(&[]), "unknown");
        assert_eq!(wait_site(&frames(&["schedule+0x1"])), "schedule");
    }
}
