//! Measurement and output: per-iteration samples in a preallocated ring, and the table, CSV and
//! JSON output of ucx_perftest (same columns, same widths).

use crate::params::{Shape, TestId, TestParams};
use crate::timer::Ticker;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutputOpts {
    /// `-f`: only the final numbers, no progress lines.
    pub final_only: bool,
    /// `-v`: CSV output.
    pub csv: bool,
    /// `--json`: one JSON object with the final numbers.
    pub json: bool,
    /// `-N`: thousands separators in integer columns.
    pub thousands: bool,
    /// `-R`: percentile rank of the first latency column.
    pub percentile: f64,
    /// Print nothing (used by the server half of `--local`).
    pub quiet: bool,
}

impl Default for OutputOpts {
    fn default() -> Self {
        OutputOpts {
            final_only: false,
            csv: false,
            json: false,
            thousands: false,
            percentile: 50.0,
            quiet: false,
        }
    }
}

/// One line of results.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Row {
    /// Iterations measured so far.
    pub iterations: u64,
    /// Latency at the percentile rank, µs.
    pub lat_percentile: f64,
    /// Average latency over the last report interval, µs.
    pub lat_avg: f64,
    /// Average latency over the whole run, µs.
    pub lat_overall: f64,
    /// Bandwidth over the last interval, MB/s (2^20 bytes).
    pub bw_avg: f64,
    /// Bandwidth over the whole run, MB/s.
    pub bw_overall: f64,
    /// Message rate over the last interval, msg/s.
    pub mr_avg: f64,
    /// Message rate over the whole run, msg/s.
    pub mr_overall: f64,
}

/// Size of the sample ring: the percentile covers at most this many recent iterations.
pub const RING: usize = 1 << 20;

/// Records per-iteration times and prints progress about once a second.
pub struct Recorder {
    ticker: Ticker,
    ring: Vec<u32>,
    scratch: Vec<u32>,
    count: u64,
    start: u64,
    last: u64,
    interval: u64,
    rep_tick: u64,
    rep_count: u64,
    /// Divisor applied to iteration times: 2 for ping-pong (half the round trip).
    div: f64,
    size: f64,
    opts: OutputOpts,
    printed_progress: bool,
}

impl Recorder {
    /// A recorder for `params`; `loopback` runs do not halve (the message goes one way).
    pub fn new(ticker: Ticker, params: &TestParams, loopback: bool, opts: OutputOpts) -> Self {
        let div = if params.test.shape() == Shape::PingPong && !loopback {
            2.0
        } else {
            1.0
        };
        let ring_len = RING
            .min(params.iterations.next_power_of_two() as usize)
            .max(1);
        Recorder {
            ticker,
            ring: vec![0; ring_len],
            scratch: Vec::with_capacity(ring_len),
            count: 0,
            start: 0,
            last: 0,
            interval: ticker.ticks(1.0),
            rep_tick: 0,
            rep_count: 0,
            div,
            size: params.size() as f64,
            opts,
            printed_progress: false,
        }
    }

    /// The ticker.
    pub fn ticker(&self) -> &Ticker {
        &self.ticker
    }

    /// Starts the measurement now.
    pub fn begin(&mut self) {
        let now = self.ticker.now();
        self.start = now;
        self.last = now;
        self.rep_tick = now;
        self.rep_count = 0;
        self.count = 0;
    }

    /// Records the end of one iteration (the time since the previous one). No allocation.
    #[inline]
    pub fn record(&mut self) {
        let now = self.ticker.now();
        let dt = now.wrapping_sub(self.last).min(u32::MAX as u64) as u32;
        self.last = now;
        let mask = self.ring.len() - 1;
        self.ring[(self.count as usize) & mask] = dt;
        self.count += 1;
        if now.wrapping_sub(self.rep_tick) >= self.interval {
            self.progress(now);
        }
    }

    fn percentile_of_last(&mut self, n: u64) -> f64 {
        let n = (n as usize).min(self.ring.len()).min(self.count as usize);
        if n == 0 {
            return 0.0;
        }
        let mask = self.ring.len() - 1;
        self.scratch.clear();
        let first = self.count as usize - n;
        for i in first..self.count as usize {
            self.scratch.push(self.ring[i & mask]);
        }
        let rank = ((self.opts.percentile / 100.0) * (n as f64)).ceil() as usize;
        let k = rank.clamp(1, n) - 1;
        let (_, v, _) = self.scratch.select_nth_unstable(k);
        self.ticker.secs(*v as u64) * 1e6 / self.div
    }

    fn row(&mut self, now: u64, pct_over: u64) -> Row {
        let n_int = self.count - self.rep_count;
        let t_int = self.ticker.secs(now.wrapping_sub(self.rep_tick));
        let t_all = self.ticker.secs(now.wrapping_sub(self.start));
        let (n_int, t_int) = if n_int == 0 {
            (self.count, t_all)
        } else {
            (n_int, t_int)
        };
        let lat = |t: f64, n: u64, div: f64| {
            if n == 0 {
                0.0
            } else {
                t * 1e6 / n as f64 / div
            }
        };
        let rate = |t: f64, n: u64, div: f64| {
            if t <= 0.0 {
                0.0
            } else {
                n as f64 * div / t
            }
        };
        let mr_avg = rate(t_int, n_int, self.div);
        let mr_overall = rate(t_all, self.count, self.div);
        Row {
            iterations: self.count,
            lat_percentile: self.percentile_of_last(pct_over),
            lat_avg: lat(t_int, n_int, self.div),
            lat_overall: lat(t_all, self.count, self.div),
            bw_avg: mr_avg * self.size / (1024.0 * 1024.0),
            bw_overall: mr_overall * self.size / (1024.0 * 1024.0),
            mr_avg,
            mr_overall,
        }
    }

    /// Marks the end of the measurement without counting an iteration: the time a stream test
    /// spends waiting for its last operations (drain, flush) belongs to the run.
    pub fn mark_end(&mut self) {
        self.last = self.ticker.now();
    }

    #[cold]
    fn progress(&mut self, now: u64) {
        let since = self.count - self.rep_count;
        let row = self.row(now, since);
        self.rep_tick = now;
        self.rep_count = self.count;
        if !(self.opts.quiet || self.opts.final_only || self.opts.csv || self.opts.json) {
            println!("{}", format_row("[thread 0]", &row, self.opts.thousands));
            self.printed_progress = true;
        }
    }

    /// Ends the measurement and gives the final row (percentile over the whole run, up to the
    /// ring's size; averages over the last report interval, as ucx_perftest).
    pub fn finish(&mut self) -> Row {
        let now = self.last;
        self.row(now, self.count)
    }
}

fn sep(n: f64, thousands: bool) -> String {
    let s = format!("{n:.0}");
    if !thousands {
        return s;
    }
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

/// Formats one table row exactly as ucx_perftest: stage, iterations, three latencies, two
/// bandwidths, two message rates.
pub fn format_row(stage: &str, r: &Row, thousands: bool) -> String {
    format!(
        "{:<14}{:>14} {:>10.3} {:>9.3} {:>9.3} {:>11.2} {:>10.2} {:>11} {:>11}",
        stage,
        sep(r.iterations as f64, thousands),
        r.lat_percentile,
        r.lat_avg,
        r.lat_overall,
        r.bw_avg,
        r.bw_overall,
        sep(r.mr_avg, thousands),
        sep(r.mr_overall, thousands)
    )
}

fn center(text: &str, width: usize) -> String {
    let pad = width.saturating_sub(text.len());
    let left = pad / 2;
    format!("{}{}{}", " ".repeat(left), text, " ".repeat(pad - left))
}

/// The table header of ucx_perftest for `test` (`Stage` column, or `Test` with `-f`).
pub fn table_header(test: TestId, opts: &OutputOpts) -> String {
    let pct = format!("{:.1}%ile", opts.percentile);
    let stage = if opts.final_only { "Test" } else { "Stage" };
    let rule1 = "+--------------+--------------+------------------------------+---------------------+-----------------------+";
    let rule2 = "+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+";
    format!(
        "{rule1}\n|              |              |{}|   bandwidth (MB/s)  |  message rate (msg/s) |\n{rule2}\n|{}| # iterations |{}| average | overall |  average |  overall |  average  |  overall  |\n{rule2}",
        center(test.latency_title(), 30),
        center(stage, 14),
        center(&pct, 10),
    )
}

/// The CSV header of ucx_perftest.
pub fn csv_header(opts: &OutputOpts) -> String {
    format!(
        "iterations,{:.1}_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr",
        opts.percentile
    )
}

/// One CSV line.
pub fn csv_row(r: &Row) -> String {
    format!(
        "{},{:.3},{:.3},{:.3},{:.2},{:.2},{:.0},{:.0}",
        r.iterations,
        r.lat_percentile,
        r.lat_avg,
        r.lat_overall,
        r.bw_avg,
        r.bw_overall,
        r.mr_avg,
        r.mr_overall
    )
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// The final numbers as one JSON object.
pub fn json_row(p: &TestParams, r: &Row, opts: &OutputOpts) -> String {
    format!(
        "{{\"test\":{},\"transport\":{},\"device\":{},\"layout\":{},\"size\":{},\"iterations\":{},\"percentile\":{:.1},\"latency_us\":{{\"percentile\":{:.4},\"average\":{:.4},\"overall\":{:.4}}},\"bandwidth_mbs\":{{\"average\":{:.3},\"overall\":{:.3}}},\"msg_rate\":{{\"average\":{:.1},\"overall\":{:.1}}}}}",
        json_str(p.test.name()),
        json_str(&p.transport),
        json_str(&p.device),
        json_str(p.layout.name()),
        p.size(),
        r.iterations,
        opts.percentile,
        r.lat_percentile,
        r.lat_avg,
        r.lat_overall,
        r.bw_avg,
        r.bw_overall,
        r.mr_avg,
        r.mr_overall
    )
}

/// Prints the header for a run (nothing for CSV/JSON/quiet).
pub fn print_header(test: TestId, opts: &OutputOpts) {
    if opts.quiet || opts.json {
        return;
    }
    if opts.csv {
        println!("{}", csv_header(opts));
    } else {
        println!("{}", table_header(test, opts));
    }
}

/// Prints the final line.
pub fn print_final(p: &TestParams, r: &Row, opts: &OutputOpts) {
    if opts.quiet {
        return;
    }
    if opts.json {
        println!("{}", json_row(p, r, opts));
    } else if opts.csv {
        println!("{}", csv_row(r));
    } else {
        let stage = if opts.final_only { "" } else { "Final:" };
        println!("{}", format_row(stage, r, opts.thousands));
    }
}

/// The box the server prints about the test (as ucx_perftest's server).
pub fn info_box(p: &TestParams) -> String {
    let rule = format!("+{}+", "-".repeat(106));
    let line = |k: &str, v: &str| format!("| {:<14}{:<90} |", k, v);
    let api = match p.test.api() {
        crate::params::Api::Uct => "transport layer",
        crate::params::Api::Ucp => "protocol layer",
    };
    let sizes: Vec<String> = p.sizes.iter().map(|s| s.to_string()).collect();
    let mut lines = vec![
        rule.clone(),
        line("API:", api),
        line("Test:", p.test.description()),
        line("Data layout:", p.layout.name()),
        line("Send memory:", "host"),
        line("Recv memory:", "host"),
        line("Message size:", &sizes.join(",")),
    ];
    if p.test.api() == crate::params::Api::Uct {
        lines.insert(
            2,
            line("Transport:", &format!("{}/{}", p.transport, p.device)),
        );
    }
    lines.push(rule);
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_has_ucx_widths() {
        let r = Row {
            iterations: 3_000_000,
            lat_percentile: 0.276,
            lat_avg: 2.959,
            lat_overall: 2.523,
            bw_avg: 2.58,
            bw_overall: 3.02,
            mr_avg: 337922.0,
            mr_overall: 396399.0,
        };
        // A line printed by UCX 1.13's ucx_perftest for these numbers.
        let ucx = "Final:               3000000      0.276     2.959     2.523        2.58       3.02      337922      396399";
        assert_eq!(format_row("Final:", &r, false), ucx);
        assert_eq!(sep(1234567.0, true), "1,234,567");
        assert_eq!(sep(123.0, true), "123");
    }

    #[test]
    fn header_matches_ucx() {
        let h = table_header(TestId::AmLat, &OutputOpts::default());
        let lines: Vec<&str> = h.lines().collect();
        assert_eq!(lines[1], "|              |              |        latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |");
        assert_eq!(lines[3], "|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |");
        let o = OutputOpts {
            final_only: true,
            ..OutputOpts::default()
        };
        let h = table_header(TestId::AmBw, &o);
        assert!(h.contains("       overhead (usec)        "));
        assert!(h.contains("|     Test     |"));
    }

    #[test]
    fn time_after_the_last_iteration_counts_when_marked() {
        let p = TestParams {
            test: TestId::PutBw,
            layout: crate::params::Layout::Short,
            sizes: vec![8],
            iterations: 10,
            warmup: 0,
            outstanding: 1,
            window: 1,
            transport: String::new(),
            device: String::new(),
            mem: Default::default(),
        };
        let opts = OutputOpts {
            quiet: true,
            ..OutputOpts::default()
        };
        let mut r = Recorder::new(Ticker::new(), &p, false, opts);
        r.begin();
        for _ in 0..10 {
            r.record();
        }
        let quick = r.finish();
        std::thread::sleep(std::time::Duration::from_millis(20));
        r.mark_end();
        let drained = r.finish();
        assert_eq!(drained.iterations, 10);
        // 10 iterations over at least 20 ms: at most 500 per second.
        assert!(drained.mr_overall <= 500.0, "{drained:?}");
        assert!(drained.lat_overall >= 2000.0, "{drained:?}");
        assert!(
            quick.mr_overall > drained.mr_overall,
            "{quick:?} {drained:?}"
        );
    }

    #[test]
    fn csv_matches_ucx() {
        assert_eq!(
            csv_header(&OutputOpts::default()),
            "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr"
        );
    }
}
