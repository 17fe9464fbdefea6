//! Figures: percentiles of one run, medians and spread over repetitions, CPU use of the
//! processes involved, and the one table the bench prints.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::servers::cpu_seconds;

/// Per-request latencies of one run, in nanoseconds.
#[derive(Default)]
pub struct Latencies(pub Vec<u64>);

impl Latencies {
    pub fn extend(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }

    /// The `p`-th percentile (0..=100), in microseconds; `None` when there are no samples.
    pub fn percentile_us(&mut self, p: f64) -> Option<f64> {
        if self.0.is_empty() {
            return None;
        }
        self.0.sort_unstable();
        let rank = ((p / 100.0) * (self.0.len() - 1) as f64).round() as usize;
        Some(self.0[rank.min(self.0.len() - 1)] as f64 / 1000.0)
    }
}

/// Median and range of one figure over the repetitions.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Summary {
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let median = if v.len() % 2 == 1 {
            v[v.len() / 2]
        } else {
            (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
        };
        Some(Summary {
            median,
            min: v[0],
            max: v[v.len() - 1],
            n: v.len(),
        })
    }
}

/// What the repetitions of one scenario measured: variant → metric → one value per repetition.
#[derive(Default)]
pub struct Samples(BTreeMap<(String, String), Vec<f64>>);

impl Samples {
    pub fn add(&mut self, variant: &str, metric: &str, value: f64) {
        self.0
            .entry((variant.to_string(), metric.to_string()))
            .or_default()
            .push(value);
    }

    pub fn get(&self, variant: &str, metric: &str) -> Option<Summary> {
        self.0
            .get(&(variant.to_string(), metric.to_string()))
            .and_then(|v| Summary::of(v))
    }
}

/// CPU used by the bench itself, the server and the proxy over one measured interval, in cores.
pub struct CpuMeter {
    pids: Vec<(&'static str, u32)>,
    start: Vec<f64>,
    t0: Instant,
}

impl CpuMeter {
    pub fn start(pids: &[(&'static str, u32)]) -> CpuMeter {
        CpuMeter {
            pids: pids.to_vec(),
            start: pids.iter().map(|(_, p)| cpu_seconds(*p)).collect(),
            t0: Instant::now(),
        }
    }

    /// "srv 1.42 px 0.38 cli 0.12" — cores each used on average.
    pub fn finish(&self) -> String {
        let wall = self.t0.elapsed().as_secs_f64().max(1e-9);
        self.pids
            .iter()
            .zip(&self.start)
            .map(|((label, pid), s)| format!("{label} {:.2}", (cpu_seconds(*pid) - s) / wall))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// CPU used by every process on the machine except the bench's own (bench, server, proxies):
/// other people's work, which skews what is measured on a shared machine. Kept apart from it, the
/// time the hypervisor gave this VM's CPUs to other guests (steal), which skews it as much.
pub struct ForeignCpu {
    machine: MachineCpu,
    /// CPU seconds of our processes at the start, by pid.
    ours: Vec<(u32, f64)>,
    /// How many retired proxies there were at the start.
    retired_before: usize,
    t0: Instant,
}

impl ForeignCpu {
    /// `pids`: our running processes; `retired`: (pid, CPU seconds at exit) of our proxies
    /// that were stopped, oldest first.
    pub fn start(pids: &[(&'static str, u32)], retired: &[(u32, f64)]) -> ForeignCpu {
        ForeignCpu {
            machine: MachineCpu::now(),
            ours: pids.iter().map(|(_, p)| (*p, cpu_seconds(*p))).collect(),
            retired_before: retired.len(),
            t0: Instant::now(),
        }
    }

    /// Cores the others used on average since `start`.
    pub fn cores(&self, pids: &[(&'static str, u32)], retired: &[(u32, f64)]) -> f64 {
        let wall = self.t0.elapsed().as_secs_f64().max(1e-9);
        let at_start = |pid: u32| {
            self.ours
                .iter()
                .find(|(p, _)| *p == pid)
                .map_or(0.0, |(_, c)| *c)
        };
        let running: f64 = pids
            .iter()
            .map(|(_, p)| cpu_seconds(*p) - at_start(*p))
            .sum();
        let stopped: f64 = retired
            .get(self.retired_before..)
            .unwrap_or(&[])
            .iter()
            .map(|(p, c)| c - at_start(*p))
            .sum();
        ((MachineCpu::now().busy - self.machine.busy - running - stopped) / wall).max(0.0)
    }

    /// Cores the hypervisor took from this machine on average since `start` (steal time).
    pub fn steal_cores(&self) -> f64 {
        let wall = self.t0.elapsed().as_secs_f64().max(1e-9);
        ((MachineCpu::now().steal - self.machine.steal) / wall).max(0.0)
    }
}

/// CPU seconds of the whole machine (all cores) so far, from /proc/stat.
struct MachineCpu {
    /// Spent running something: user, nice, system, irq, softirq.
    busy: f64,
    /// Taken by the hypervisor for other guests while this one had work.
    steal: f64,
}

impl MachineCpu {
    fn now() -> MachineCpu {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let f: Vec<f64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal, in 1/100 s (USER_HZ)
        let field = |i: usize| f.get(i).copied().unwrap_or(0.0) / 100.0;
        MachineCpu {
            busy: [0, 1, 2, 5, 6].into_iter().map(field).sum(),
            steal: field(7),
        }
    }
}

/// How a figure is printed.
#[derive(Debug, Clone, Copy)]
pub enum Unit {
    PerSec,
    Micros,
    Millis,
    MiB,
}

pub fn fmt_value(v: f64, unit: Unit) -> String {
    match unit {
        Unit::PerSec => format!("{}/s", group(v)),
        Unit::Micros => format!("{v:.0} µs"),
        Unit::Millis => {
            if v < 10.0 {
                format!("{v:.2} ms")
            } else {
                format!("{v:.0} ms")
            }
        }
        Unit::MiB => format!("{v:.1} MiB"),
    }
}

/// 12345.6 → "12,346".
fn group(v: f64) -> String {
    let s = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn fmt_summary(s: &Summary, unit: Unit) -> String {
    if s.n <= 1 || (s.max - s.min).abs() < f64::EPSILON {
        fmt_value(s.median, unit)
    } else {
        let range = match unit {
            Unit::PerSec => format!("{}–{}", group(s.min), group(s.max)),
            Unit::Micros => format!("{:.0}–{:.0}", s.min, s.max),
            Unit::Millis if s.max < 10.0 => format!("{:.2}–{:.2}", s.min, s.max),
            Unit::Millis => format!("{:.0}–{:.0}", s.min, s.max),
            Unit::MiB => format!("{:.1}–{:.1}", s.min, s.max),
        };
        format!("{} [{range}]", fmt_value(s.median, unit))
    }
}

/// One line of the table.
pub struct Row {
    pub scenario: String,
    pub metric: String,
    /// What msgproxy is compared with ("server 41,000/s [..]"), if anything.
    pub baseline: String,
    /// The figure through msgproxy.
    pub measured: String,
    /// Ratio or difference to the baseline.
    pub relation: String,
    pub target: String,
    /// `Some(met)` when the row has a target.
    pub met: Option<bool>,
    /// CPU use or other context.
    pub note: String,
}

impl Row {
    pub fn new(scenario: &str, metric: &str) -> Row {
        Row {
            scenario: scenario.into(),
            metric: metric.into(),
            baseline: String::new(),
            measured: String::new(),
            relation: String::new(),
            target: String::new(),
            met: None,
            note: String::new(),
        }
    }
}

/// The table, as Markdown (so it can go into docs/BENCHMARKS.md as printed). A smoke run's figures
/// mean nothing, so it gives no verdicts (a "**no**" in CI's log read like a failure).
pub fn print_table(rows: &[Row], smoke: bool) {
    println!(
        "| scenario | metric | baseline | msgproxy | ratio / difference | target | met | CPU (cores) / notes |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        let met = match r.met {
            Some(_) if smoke => "(smoke)",
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario, r.metric, r.baseline, r.measured, r.relation, r.target, met, r.note
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_and_percentiles() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Summary::of(&[4.0, 1.0]).unwrap();
        assert_eq!(s.median, 2.5);
        let mut l = Latencies((1..=100).map(|us| us * 1000).collect());
        assert_eq!(l.percentile_us(50.0), Some(51.0));
        assert_eq!(l.percentile_us(99.0), Some(99.0));
        assert_eq!(group(1234567.4), "1,234,567");
        assert_eq!(group(999.0), "999");
    }
}
