//! The Prometheus text exposition format (version 0.0.4), written by hand: a few dozen lines
//! instead of a metrics framework, and every sample is visible where it is produced.
//!
//! Rules followed (<https://prometheus.io/docs/instrumenting/exposition_formats/>): one `# HELP`
//! and one `# TYPE` line per family, before its samples, all samples of a family together;
//! label values escape `\`, `"` and newline; HELP text escapes `\` and newline; floats are
//! written as Rust prints them (`NaN`, `+Inf`, `-Inf` spelled the Prometheus way).

use std::fmt::Write;

/// The content type of what [`Exposition`] writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What kind of family a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A sample value: integers print exactly, floats as Prometheus reads them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(v)
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Value::Int(v as u64)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

/// A page of metrics being written.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts a family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = writeln!(
            self.out,
            "# HELP {name} {}\n# TYPE {name} {}",
            escape_help(help),
            kind.name()
        );
    }

    /// One sample of the current family (`name` may carry a suffix: `_bucket`, `_sum`, ...).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Into<Value>) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (label, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{label}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        self.out.push(' ');
        match value.into() {
            Value::Int(v) => {
                let _ = write!(self.out, "{v}");
            }
            Value::Float(v) => write_float(&mut self.out, v),
        }
        self.out.push('\n');
    }

    /// A histogram's samples: `_bucket` per upper bound (cumulative counts, the last one
    /// `+Inf`), `_sum` and `_count`. `cumulative` has one more entry than `bounds`.
    pub fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        bounds: &[f64],
        cumulative: &[u64],
        sum: f64,
    ) {
        let mut with_le: Vec<(&str, &str)> = labels.to_vec();
        let bucket = format!("{name}_bucket");
        let mut les: Vec<String> = bounds.iter().map(|b| float_text(*b)).collect();
        les.push("+Inf".to_string());
        with_le.push(("le", ""));
        let last = with_le.len() - 1;
        for (le, count) in les.iter().zip(cumulative) {
            with_le[last] = ("le", le);
            self.sample(&bucket, &with_le, *count);
        }
        self.sample(&format!("{name}_sum"), labels, sum);
        let count = cumulative.last().copied().unwrap_or(0);
        self.sample(&format!("{name}_count"), labels, count);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

fn float_text(v: f64) -> String {
    let mut s = String::new();
    write_float(&mut s, v);
    s
}

fn write_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_samples() {
        let mut e = Exposition::new();
        e.family("msgproxy_x_total", Kind::Counter, "Things.\nMore \\ text");
        e.sample("msgproxy_x_total", &[], 3u64);
        e.sample(
            "msgproxy_x_total",
            &[("schema", "a\"b"), ("table", "c\\d\ne")],
            0.25,
        );
        e.family("msgproxy_g", Kind::Gauge, "A gauge.");
        e.sample("msgproxy_g", &[], f64::NAN);
        e.sample("msgproxy_g", &[], f64::INFINITY);
        e.sample("msgproxy_g", &[], 1e-7);
        assert_eq!(
            e.finish(),
            "# HELP msgproxy_x_total Things.\\nMore \\\\ text\n\
             # TYPE msgproxy_x_total counter\n\
             msgproxy_x_total 3\n\
             msgproxy_x_total{schema=\"a\\\"b\",table=\"c\\\\d\\ne\"} 0.25\n\
             # HELP msgproxy_g A gauge.\n\
             # TYPE msgproxy_g gauge\n\
             msgproxy_g NaN\n\
             msgproxy_g +Inf\n\
             msgproxy_g 0.0000001\n"
        );
    }

    #[test]
    fn histogram_lines() {
        let mut e = Exposition::new();
        e.family("h_seconds", Kind::Histogram, "Latency.");
        e.histogram("h_seconds", &[("t", "x")], &[0.5, 1.0], &[1, 3, 4], 2.5);
        assert_eq!(
            e.finish(),
            "# HELP h_seconds Latency.\n\
             # TYPE h_seconds histogram\n\
             h_seconds_bucket{t=\"x\",le=\"0.5\"} 1\n\
             h_seconds_bucket{t=\"x\",le=\"1\"} 3\n\
             h_seconds_bucket{t=\"x\",le=\"+Inf\"} 4\n\
             h_seconds_sum{t=\"x\"} 2.5\n\
             h_seconds_count{t=\"x\"} 4\n"
        );
    }
}
