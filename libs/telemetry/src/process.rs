//! The process's own metrics under their standard names (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, ...), read from `/proc/self` at each scrape, as
//! Prometheus's client libraries export them. Elsewhere than Linux, none are exported.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Reads `/proc/self` when scraped.
#[derive(Debug)]
pub(crate) struct ProcessCollector;

/// What `/proc/self` says of this process.
#[derive(Debug, Default, PartialEq)]
struct ProcessStats {
    cpu_seconds: f64,
    resident_bytes: i64,
    virtual_bytes: i64,
    threads: i64,
    start_time_seconds: f64,
    open_fds: i64,
    max_fds: i64,
}

/// The fields of `/proc/self/stat` after the command name (which may hold spaces and
/// parentheses, so the line is split after its last `)`): utime, stime, num_threads,
/// starttime and vsize, in clock ticks and bytes.
fn parse_stat(stat: &str) -> Option<(u64, u64, i64, u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name; utime is field 14.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some((
        field(14)?,
        field(15)?,
        i64::try_from(field(20)?).ok()?,
        field(22)?,
        field(23)?,
    ))
}

fn read() -> Option<ProcessStats> {
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if ticks <= 0 || page <= 0 {
        return None;
    }
    let ticks = ticks as f64;
    let (utime, stime, threads, start, vsize) =
        parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    let resident_pages: i64 = std::fs::read_to_string("/proc/self/statm")
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let boot_time: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as i64;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into the struct it is given, which lives here.
    let max_fds = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        i64::try_from(limit.rlim_cur).unwrap_or(i64::MAX)
    } else {
        -1
    };
    Some(ProcessStats {
        cpu_seconds: (utime + stime) as f64 / ticks,
        resident_bytes: resident_pages.saturating_mul(page),
        virtual_bytes: i64::try_from(vsize).unwrap_or(i64::MAX),
        threads,
        start_time_seconds: boot_time + start as f64 / ticks,
        open_fds,
        max_fds,
    })
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(stats) = read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(stats.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        let gauges: [(&str, &str, f64); 6] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                stats.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                stats.virtual_bytes as f64,
            ),
            (
                "process_threads",
                "Number of OS threads in the process",
                stats.threads as f64,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                stats.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                stats.open_fds as f64,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                stats.max_fds as f64,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime priority nice num_threads itrealvalue starttime vsize ...
        let stat = "42 (a b) (c)) S 1 42 42 0 -1 4194560 100 0 0 0 \
                    250 50 0 0 20 0 7 0 12345 987654321 500 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((250, 50, 7, 12345, 987654321)));
    }

    #[test]
    fn this_process_reads_as_running_now_with_memory_and_descriptors() {
        let stats = read().expect("/proc/self on Linux");
        assert!(stats.resident_bytes > 0 && stats.virtual_bytes >= stats.resident_bytes);
        assert!(stats.threads >= 1 && stats.open_fds >= 3 && stats.max_fds >= stats.open_fds);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            stats.start_time_seconds <= now + 1.0 && stats.start_time_seconds > now - 3600.0,
            "started {} s ago",
            now - stats.start_time_seconds
        );
    }
}
